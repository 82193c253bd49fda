// The output layer of a language model whose weight is its input embedding table (weight tying, as
// GPT-2's lm_head and BERT's cls.predictions.decoder are in Hugging Face's models).
//
// The head owns no weight: forward and backward are handed the embedding's tensor and parameter, so
// named_parameters() lists the table once (under the embedding's name, as a PyTorch state_dict does) and
// the head's share of its gradient lands in the same buffer as the lookup's. It prints as the nn.Linear
// PyTorch holds in its place. A bias, when the model has one (BERT's cls.predictions.bias), is likewise a
// parameter of the enclosing module, passed in.
#pragma once

#include <string>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/tensor.hpp"
#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/bf16.hpp"
#include "eigenformer/tensor/packed_matrix.hpp"

namespace eigenformer::models {

template <floating_element T>
class TiedLMHead : public nn::Module<T> {
 public:
  // `prints_bias`: what the repr says (PyTorch's tied Linear has bias=False in GPT-2, bias=True in BERT).
  TiedLMHead(index_t in_features, index_t out_features, bool prints_bias = false)
      : in_(in_features), out_(out_features), prints_bias_(prints_bias) {}

  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override {
    return "in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
           ", bias=" + this->py_bool(prints_bias_);
  }

  // hidden (B, T, C) -> logits (B, T, V) = hidden weight^T (+ bias), weight (V, C) being the tied embedding.
  Tensor<T, 3> forward(const Tensor<T, 3>& hidden, const Tensor<T, 2>& weight, const Tensor<T, 1>* bias = nullptr) const {
    const index_t b = hidden.shape()[0], t = hidden.shape()[1];
    if (hidden.shape()[2] != in_)
      throw shape_error("TiedLMHead.forward: hidden " + shape_string(hidden.shape()) + " does not end in the " +
                        std::to_string(in_) + " features of the tied weight " + shape_string(weight.shape()));
    const auto h2 = hidden.reshape(Shape<2>{b * t, in_});
    const backend::Epilogue<T> epilogue{bias, backend::Activation::none};
    nn::detail::PreparedWeight prepared;  // none while recording: its products read the float weight
    if (this->records_for_backward() && (bf16_only_ || packed_only_))
      throw std::logic_error(std::string("TiedLMHead.forward: the head is in training mode, but its tied weight is held "
                                         "only as ") +
                             (bf16_only_ ? eigenformer::detail::held_as_bf16 : eigenformer::detail::held_as_packed) +
                             " and training needs the float weight; call eval(), run under InferenceMode, or train a "
                             "model that keeps its float weights");
    if (!this->records_for_backward())
      prepared = {weight_bf16_.empty() ? nullptr : &weight_bf16_, weight_packed_.empty() ? nullptr : &weight_packed_,
                  bf16_only_, packed_only_};
    const auto logits = nn::detail::dense_product(h2, weight.t(), prepared, epilogue);  // (B T, V)
    if (this->records_for_backward()) this->save_for_backward(Context{h2, b, t});
    return logits.view(Shape<3>{b, t, out_});
  }

  // Reads the embedding's bfloat16 copy of the tied table (nn::Embedding::bf16_weight(), (C, V), shared, not
  // copied) for products of a few rows (decoding; tensor/bf16.hpp), and for every product once the embedding
  // has released its float table. A snapshot: call again after the table changes. `weight`: the tied float
  // table (V, C) when the embedding keeps it (FloatWeights::keep; the packed copy, if any, is then made again
  // from its rounded values), null when the embedding released it (every product then reads the bfloat16
  // copy and the packed copy is dropped).
  void use_bf16_weight(const Bf16Matrix& weight_t, const Tensor<float, 2>* weight)
    requires std::is_same_v<T, float>
  {
    if (packed_only_)
      throw std::logic_error(std::string("TiedLMHead.use_bf16_weight: the tied weight is held only as ") +
                             eigenformer::detail::held_as_packed + ", so there are no float values to round");
    if (weight_t.rows() != in_ || weight_t.cols() != out_ || !(weight_t.col_major() || in_ == 1))
      throw shape_error("TiedLMHead.use_bf16_weight: the bfloat16 table " + weight_t.shape_string() +
                        " is not the column-major (" + std::to_string(in_) + ", " + std::to_string(out_) +
                        ") transpose of the tied embedding");
    if (weight) check_tied_weight("use_bf16_weight", *weight);
    weight_bf16_ = weight_t;
    bf16_only_ = weight == nullptr;
    if (bf16_only_) weight_packed_ = PackedMatrix();
    else if (!weight_packed_.empty()) pack_weights(*weight);  // the rounded values
  }

  // Keeps the tied weight (V, C) also in the packed kernel's order (tensor/packed_matrix.hpp), which forward
  // then reads for inference products of 8 rows or more (a prompt's logits): the same bits, about the
  // table's memory again. A snapshot: call again after the weight changes.
  // FloatWeights::release: every product then reads the packed copy (any number of rows, as
  // nn::Linear::pack_weights), and the caller frees the embedding's float table, which then reads its rows out of
  // the same copy (nn::Embedding::use_packed_table(*packed_weight())). Nothing to do once held so.
  void pack_weights(const Tensor<float, 2>& weight, FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    check_tied_weight("pack_weights", weight);
    if (bf16_only_)
      throw std::logic_error("TiedLMHead.pack_weights: the tied weight is held only as bfloat16 (to_bf16_weights with "
                             "FloatWeights::release), so there are no float values to pack");
    if (packed_only_) return;
    weight_packed_ = PackedMatrix(weight.t());
    packed_only_ = floats == FloatWeights::release && !weight_packed_.empty();
  }
  // Drops the packed copy: products read the tied float table `weight` again. When the copy was the only one
  // (FloatWeights::release), the embedding must have its table back first (nn::Embedding::use_float_table):
  // std::logic_error while `weight` is still released, rather than a head that multiplies by nothing.
  void unpack_weights(const nn::Parameter<T, 2>& weight) {
    if (weight_packed_.empty()) return;
    if (weight.float_released())
      throw std::logic_error(std::string("TiedLMHead.unpack_weights: the tied table is held only as ") +
                             weight.held_as() + "; give the embedding its float table back first "
                             "(Embedding::use_float_table)");
    weight_packed_ = PackedMatrix();
    packed_only_ = false;
  }
  // The packed copy of the tied weight's transpose (C, V), or null before pack_weights.
  const PackedMatrix* packed_weight() const noexcept { return weight_packed_.empty() ? nullptr : &weight_packed_; }

  // Accumulates dL/dweight += g^T hidden into the tied parameter (and dL/dbias, the column sums of g, when a
  // bias is given) and returns dL/dhidden = g weight.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_logits, nn::Parameter<T, 2>& weight, nn::Parameter<T, 1>* bias = nullptr) {
    const auto ctx = this->template take_saved<Context>("TiedLMHead");
    nn::detail::check_grad_shape("TiedLMHead.backward", grad_logits.shape(), Shape<3>{ctx.b, ctx.t, out_});
    const auto g = grad_logits.reshape(Shape<2>{ctx.b * ctx.t, out_});  // (N, V)
    if (weight.requires_grad()) {
      auto dw = weight.grad_buffer();
      backend::gemm(g.t(), ctx.hidden, dw, T(1), T(1));
    }
    if (bias && bias->requires_grad()) backend::add_column_sums(g, bias->grad_buffer().data());
    return backend::gemm(g, weight.data).view(Shape<3>{ctx.b, ctx.t, in_});
  }

 private:
  // The weight handed to a method that keeps a copy of it must be the (V, C) table this head was made for.
  void check_tied_weight(const char* method, const Tensor<float, 2>& weight) const {
    if (weight.shape()[0] != out_ || weight.shape()[1] != in_)
      throw shape_error(std::string("TiedLMHead.") + method + ": weight " + shape_string(weight.shape()) + " is not (" +
                        std::to_string(out_) + ", " + std::to_string(in_) + ")");
  }

  struct Context {
    Tensor<T, 2> hidden;  // (B T, C), the forward input
    index_t b, t;
  };
  index_t in_, out_;
  bool prints_bias_;
  Bf16Matrix weight_bf16_;  // (C, V) column-major: wte's rows, when use_bf16_weight was called
  bool bf16_only_ = false;  // the embedding's float table was released: every product reads weight_bf16_
  PackedMatrix weight_packed_;  // (C, V) packed, when pack_weights was called
  bool packed_only_ = false;  // packed with FloatWeights::release: every product reads weight_packed_
};

}  // namespace eigenformer::models
