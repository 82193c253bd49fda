// nn.Linear: y = x W^T + b over the last dim, with weight stored (out_features, in_features) as in
// PyTorch so checkpoints load without transposes.
//
// detail::dense_forward / dense_backward below are the whole computation of both fully connected layers,
// Linear and GPT-2's Conv1D (conv1d.hpp), which differ only in how their weight is laid out in memory.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/bf16.hpp"
#include "eigenformer/tensor/packed_matrix.hpp"

namespace eigenformer::nn {

namespace detail {

// How a fully connected layer stores its weight: (out, in) for nn.Linear, (in, out) for Conv1D.
enum class DenseLayout { out_in, in_out };

// What a recording forward keeps for backward: the input flattened to (N, in) (a handle, not a copy)
// and its original shape.
template <floating_element T>
struct DenseContext {
  Tensor<T, 2> x;
  std::vector<index_t> input_shape;
};

// The weight as an (in, out) matrix, the right operand of x W; a transposed view for Linear, read in place.
template <floating_element T>
Tensor<T, 2> dense_in_out(const Tensor<T, 2>& weight, DenseLayout layout) {
  return layout == DenseLayout::out_in ? weight.t() : weight;
}

// The prepared copies of a layer's weight that inference products may read instead of the float tensor:
// bfloat16 (to_bf16_weights, tensor/bf16.hpp) for a decoding step's few rows, packed (pack_weights,
// tensor/packed_matrix.hpp) for products of many rows. Null when the layer has none. bf16_only / packed_only:
// the float tensor was released (FloatWeights::release), so every product reads that copy.
struct PreparedWeight {
  const Bf16Matrix* bf16 = nullptr;
  const PackedMatrix* packed = nullptr;
  bool bf16_only = false;
  bool packed_only = false;
};

// Those copies, as a fully connected layer (Linear, Conv1D) keeps them beside its float weight: one place for
// both layers' to_bf16_weights / pack_weights, which differ only in the weight's layout.
class WeightCopies {
 public:
  // The weight rounded to bfloat16 in place and a bfloat16 copy of it; then either the packed copy (if any)
  // made again from the rounded values (FloatWeights::keep), or the float weight and the packed copy freed
  // (FloatWeights::release). Nothing to do for a weight already held only as bfloat16.
  void to_bf16(Parameter<float, 2>& weight, DenseLayout layout, FloatWeights floats) {
    if (packed_only_)
      throw std::logic_error("to_bf16_weights: the weight " + shape_string(weight.shape()) + " is held only " +
                             "packed (pack_weights with FloatWeights::release), so there are no float values to "
                             "round; convert a model that keeps its float weights");
    if (weight.float_released()) return;
    // A weight about to be freed needs no rounding in place (a pass over memory that a load has just
    // filled: 20% of `bert --dtype bf16`'s time): the copy rounds as it converts.
    if (floats == FloatWeights::keep) round_to_bf16_(weight.data);
    bf16_ = Bf16Matrix(dense_in_out(weight.data, layout));
    if (floats == FloatWeights::release) {
      packed_ = PackedMatrix();
      weight.release_float_(eigenformer::detail::held_as_bf16);
      bf16_only_ = true;
    } else if (!packed_.empty()) {
      pack(weight, layout, FloatWeights::keep);
    }
  }
  // The packed copy, made again from the float weight; with FloatWeights::release the float weight is then
  // freed (where there is a packed kernel: elsewhere nothing is packed and the float weight stays). Nothing to
  // do for a weight already held only packed.
  void pack(Parameter<float, 2>& weight, DenseLayout layout, FloatWeights floats) {
    if (bf16_only_)
      throw std::logic_error("pack_weights: the weight " + shape_string(weight.shape()) +
                             " is held only as bfloat16 (to_bf16_weights with FloatWeights::release), so there are no "
                             "float values to pack; its products already read the bfloat16 copy");
    if (packed_only_) return;
    packed_ = PackedMatrix(dense_in_out(weight.data, layout));
    if (floats == FloatWeights::release && !packed_.empty()) {
      bf16_ = Bf16Matrix();
      weight.release_float_(eigenformer::detail::held_as_packed);
      packed_only_ = true;
    }
  }
  // Drops the packed copy; a weight held only packed gets its float values back from it first.
  void unpack(Parameter<float, 2>& weight, DenseLayout layout) {
    if (packed_only_) {
      // (out, in) read back as it is stored, not (in, out) read back and transposed.
      weight.restore_float_(layout == DenseLayout::out_in ? packed_.transposed_columns(0, packed_.cols())
                                                           : packed_.to_dense());
      packed_only_ = false;
    }
    packed_ = PackedMatrix();
  }

  const Bf16Matrix* bf16() const noexcept { return bf16_.empty() ? nullptr : &bf16_; }
  const PackedMatrix* packed() const noexcept { return packed_.empty() ? nullptr : &packed_; }
  bool bf16_only() const noexcept { return bf16_only_; }
  bool packed_only() const noexcept { return packed_only_; }
  // What an inference product may read: nothing while the layer records for backward, whose products read the
  // float weight that the optimiser updates -- which a layer holding only bfloat16 or only packed no longer has.
  PreparedWeight prepared(bool recording, const char* layer) const {
    if (recording && (bf16_only_ || packed_only_))
      throw std::logic_error(std::string(layer) + ".forward: the layer is in training mode, but its weight is held only as " +
                             (bf16_only_ ? eigenformer::detail::held_as_bf16 : eigenformer::detail::held_as_packed) +
                             " and training needs the float weight; call eval(), run under InferenceMode, or train a "
                             "model that keeps its float weights");
    if (recording) return {};
    return {bf16(), packed(), bf16_only_, packed_only_};
  }

 private:
  Bf16Matrix bf16_;
  PackedMatrix packed_;
  bool bf16_only_ = false;
  bool packed_only_ = false;
};

// x2 (N, in) w (in, out) with the epilogue, reading one of the layer's prepared copies of w when it has
// one for a product of this many rows.
template <floating_element T>
Tensor<T, 2> dense_product(const Tensor<T, 2>& x2, const Tensor<T, 2>& w, const PreparedWeight& prepared,
                           const backend::Epilogue<T>& epilogue) {
  if constexpr (std::is_same_v<T, float>) {
    if (prepared.packed_only) {
      auto y = Tensor<float, 2>::empty(Shape<2>{x2.shape()[0], prepared.packed->cols()});
      backend::gemm(x2, *prepared.packed, y, epilogue);
      return y;
    }
    if (prepared.bf16 && prepared.bf16_only) return backend::gemm(x2, *prepared.bf16, epilogue);
    if (prepared.bf16 && x2.shape()[0] <= backend::detail::gemv_max_rows) return backend::gemm(x2, w, *prepared.bf16, epilogue);
    return backend::gemm(x2, w, prepared.packed, epilogue);
  }
  return backend::gemm(x2, w, epilogue);
}

// The same product written into `out` (a view such as a column block of a wider tensor), for a caller that lays
// several layers' outputs side by side (BERT's q | k | v). Reads the packed copy when there is one, or the
// bfloat16 copy of a weight held only as bfloat16; a weight kept as bfloat16 beside its float values serves
// fresh results only (decoding's few-row products).
template <floating_element T>
void dense_product_into(const Tensor<T, 2>& x2, const Tensor<T, 2>& w, const PreparedWeight& prepared, Tensor<T, 2>& out,
                        const backend::Epilogue<T>& epilogue) {
  if constexpr (std::is_same_v<T, float>) {
    if (prepared.packed_only) return backend::gemm(x2, *prepared.packed, out, epilogue);
    if (prepared.bf16 && prepared.bf16_only) return backend::gemm(x2, *prepared.bf16, out, epilogue);
    backend::gemm(x2, w, prepared.packed, out, 1.0f, 0.0f, epilogue);
  } else {
    backend::gemm(x2, w, out, T(1), T(0), epilogue);
  }
}

// dense_product for a result that the next product reads as its left operand (a feed-forward block's hidden
// layer, which its second layer multiplies). When the result is a multiple of 1024 floats wide (rows 4 KiB
// apart, as BERT's and GPT-2's 3072 are) its rows are laid cols + 16 floats apart instead, in a wider tensor of
// which this is a view: rows 4 KiB apart put the twelve rows that the AVX-512 kernel's register block reads at
// each step of k in one set of the L1 cache, and on an AMD Zen 5 the products reading them ran 1.11-1.36x
// slower on 2 threads than with the rows spaced (throwaway driver, both layouts in one process: 128 x 768 x
// 3072, 1024 x 768 x 3072 and 2048 x 256 x 1024; bench/README.md, "thirty-fifth session"). Products read any
// row stride, so the spacing costs 64 bytes a row and saves the spaced copy that the product would otherwise
// make of its left operand where the CPU needs one (backend::detail::copies_rows_4k_apart). Few-row products (decoding) keep
// dense_product's result, whose choice of a bfloat16 copy the spaced path would not make.
template <floating_element T>
Tensor<T, 2> dense_hidden_product(const Tensor<T, 2>& x2, const Tensor<T, 2>& w, const PreparedWeight& prepared,
                                  const backend::Epilogue<T>& epilogue) {
  const index_t rows = x2.shape()[0], cols = w.shape()[1];
  if (!std::is_same_v<T, float> || cols % backend::detail::aliasing_row_floats != 0 ||
      rows <= backend::detail::gemv_max_rows || x2.shape()[1] != w.shape()[0])
    return dense_product(x2, w, prepared, epilogue);  // the unspaced result, or its error message
  auto hidden = backend::detail::empty_unaliased_rows<T>(rows, cols);
  dense_product_into(x2, w, prepared, hidden, epilogue);
  return hidden;
}

// (..., in) -> (..., out) as one gemm with the bias added in its epilogue. `context`, when given, receives
// what dense_backward needs; `prepared` holds the layer's prepared copies of dense_in_out(weight), if any.
template <floating_element T, std::size_t R>
Tensor<T, R> dense_forward(const char* layer, const Tensor<T, R>& x, const Tensor<T, 2>& weight,
                           const Tensor<T, 1>* bias, DenseLayout layout, DenseContext<T>* context,
                           const PreparedWeight& prepared = {}) {
  static_assert(R >= 1, "dense layer forward: the input needs at least one dim (the features)");
  const auto w = dense_in_out(weight, layout);
  const index_t in = w.shape()[0], out = w.shape()[1];
  if (x.shape()[R - 1] != in)
    throw shape_error(std::string(layer) + ".forward: input " + shape_string(x.shape()) + " x weight " +
                      shape_string(weight.shape()) + ": last dim of the input must be in_features " +
                      std::to_string(in));
  // (N, in); a matrix is read in place whatever its strides (a reshape would copy one whose rows are spaced,
  // as dense_hidden_product's are).
  Tensor<T, 2> x2;
  if constexpr (R == 2) x2 = x;
  else x2 = x.reshape(Shape<2>{x.numel() / in, in});
  auto y = dense_product(x2, w, prepared, backend::Epilogue<T>{bias, backend::Activation::none});  // (N, out)
  if (context) *context = DenseContext<T>{x2, std::vector<index_t>(x.shape().begin(), x.shape().end())};
  Shape<R> out_shape = x.shape();
  out_shape[R - 1] = out;
  return y.view(out_shape);
}

// Returns dL/dx = g W^T (shaped like the forward input) and accumulates dL/dW and dL/db (the sum of g over
// all leading dims) into the gradients of the parameters that require one.
template <floating_element T, std::size_t R>
Tensor<T, R> dense_backward(const char* layer, const Tensor<T, R>& grad_output, const DenseContext<T>& ctx,
                            Parameter<T, 2>& weight, Parameter<T, 1>* bias, DenseLayout layout) {
  const auto w = dense_in_out(weight.data, layout);
  const index_t n = ctx.x.shape()[0], out = w.shape()[1];
  if (grad_output.shape()[R - 1] != out || grad_output.numel() != n * out || ctx.input_shape.size() != R)
    throw shape_error(std::string(layer) + ".backward: grad_output " + shape_string(grad_output.shape()) +
                      " does not match the forward output for input " + shape_string(ctx.input_shape));
  const auto g = grad_output.reshape(Shape<2>{n, out});  // (N, out)
  if (weight.requires_grad()) {
    auto dw = weight.grad_buffer();
    // Linear's gradient is g^T x (out, in); Conv1D's the transpose, x^T g (in, out).
    if (layout == DenseLayout::out_in) backend::gemm(g.t(), ctx.x, dw, T(1), T(1));
    else backend::gemm(ctx.x.t(), g, dw, T(1), T(1));
  }
  if (bias && bias->requires_grad()) backend::add_column_sums(g, bias->grad_buffer().data());
  auto dx = backend::gemm(g, w.t());  // (N, in)
  return dx.view(as_shape<R>(ctx.input_shape));
}

}  // namespace detail

template <floating_element T>
class Linear : public Module<T> {
 public:
  // Initialised exactly as nn.Linear(in_features, out_features, bias): weight by kaiming_uniform_(a=sqrt(5)),
  // then bias, both U(-1/sqrt(in), 1/sqrt(in)), drawn from `gen` in that order.
  Linear(index_t in_features, index_t out_features, bool bias = true, Generator& gen = default_generator())
      : in_features_(in_features), out_features_(out_features) {
    if (in_features <= 0 || out_features <= 0)
      throw std::invalid_argument("Linear: in_features and out_features must be positive, got " +
                                  std::to_string(in_features) + " and " + std::to_string(out_features));
    weight = Parameter<T, 2>(Tensor<T, 2>::empty({out_features, in_features}));
    if (bias) {
      this->bias = Parameter<T, 1>(Tensor<T, 1>::empty({out_features}));
      init::linear_(weight.data, &this->bias->data, gen);
    } else {
      init::linear_<T>(weight.data, nullptr, gen);
    }
  }

  // All zeros and nothing drawn (torch.nn.utils.skip_init): for a layer whose values come next from a
  // checkpoint or from a model's own initialisation rule.
  Linear(index_t in_features, index_t out_features, bool bias, skip_init_t)
      : in_features_(in_features), out_features_(out_features) {
    if (in_features <= 0 || out_features <= 0)
      throw std::invalid_argument("Linear: in_features and out_features must be positive, got " +
                                  std::to_string(in_features) + " and " + std::to_string(out_features));
    // Memory is committed only as the weight is written (untouched_zeros): by a checkpoint's load, or by an
    // initialisation rule, so that a model loaded as bfloat16 never holds all of its float weights at once.
    weight = Parameter<T, 2>(eigenformer::detail::untouched_zeros<T>(Shape<2>{out_features, in_features}));
    if (bias) this->bias = Parameter<T, 1>(zeros<T>(Shape<1>{out_features}));
  }

  Parameter<T, 2> weight;                 // (out, in)
  std::optional<Parameter<T, 1>> bias;    // (out)

  index_t in_features() const noexcept { return in_features_; }
  index_t out_features() const noexcept { return out_features_; }

  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override {
    return "in_features=" + std::to_string(in_features_) + ", out_features=" + std::to_string(out_features_) +
           ", bias=" + this->py_bool(bias.has_value());
  }
  void register_members(Members<T>& m) override {
    m.parameter("weight", weight);
    m.parameter("bias", bias);
  }

  // (..., in) -> (..., out).
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    // The context is only built when recording: an inference forward allocates nothing beyond its output.
    std::optional<detail::DenseContext<T>> ctx;
    if (this->records_for_backward()) ctx.emplace();
    auto y = detail::dense_forward("Linear", x, weight.data, bias ? &bias->data : nullptr,
                                   detail::DenseLayout::out_in, ctx ? &*ctx : nullptr, prepared_weight());
    if (ctx) this->save_for_backward(std::move(*ctx));
    return y;
  }

  // dL/dx = g W; accumulates dL/dW += g^T x and dL/db += sum of g over all leading dims.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<detail::DenseContext<T>>("Linear");
    return detail::dense_backward("Linear", grad_output, ctx, weight, bias ? &*bias : nullptr,
                                  detail::DenseLayout::out_in);
  }

  // bfloat16 weight storage for inference (tensor/bf16.hpp): the weight rounded to bfloat16 in place, and a
  // bfloat16 copy that decoding's few-row products stream instead. With FloatWeights::keep, call again after
  // changing the weight; with FloatWeights::release the float weight is freed and every product reads the
  // copy (inference only; see Parameter::float_released).
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    weight_copies_.to_bf16(weight, detail::DenseLayout::out_in, floats);
  }
  // The bfloat16 copy, or null before to_bf16_weights().
  const Bf16Matrix* bf16_weight() const noexcept { return weight_copies_.bf16(); }

  // Keeps the weight also in the packed kernel's order (tensor/packed_matrix.hpp), which inference products
  // of 8 rows or more then read: no repacking per call, the same bits, about the weight's memory again. A
  // snapshot: call again after changing the weight. Does nothing where there is no packed kernel.
  // FloatWeights::release frees the float weight once it is packed: the packed products at the float
  // layer's memory, for inference only (see Parameter::float_released); every product then reads the packed
  // copy, those of fewer than 8 rows too, with the bits of the same rows of a product of 8 rows or more
  // (backend::gemm with a PackedMatrix), not those of the float weight's few-row kernels.
  void pack_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    weight_copies_.pack(weight, detail::DenseLayout::out_in, floats);
  }
  // Drops the packed copy, freeing its memory; products then pack the weight on every call again. A weight
  // held only packed gets its float values back from the copy first.
  void unpack_weights() {
    if constexpr (std::is_same_v<T, float>) weight_copies_.unpack(weight, detail::DenseLayout::out_in);
  }
  // The packed copy, or null before pack_weights() (or where there is no packed kernel: backend::cpu_isa()).
  const PackedMatrix* packed_weight() const noexcept { return weight_copies_.packed(); }

  // The copies an inference product may read; none while recording for backward (which throws std::logic_error
  // for a weight held only as bfloat16 or only packed).
  detail::PreparedWeight prepared_weight() const {
    // Released by a parent that holds it with others (BertSelfAttention's q | k | v packed side by side):
    // this layer has nothing to multiply by.
    if (weight.float_released() && !weight_copies_.bf16_only() && !weight_copies_.packed_only())
      throw std::logic_error(std::string("Linear.forward: the weight is held only as ") + weight.held_as() +
                             " by the module that holds it with others (BERT's self-attention packs query, key and "
                             "value side by side); call that module's forward");
    return weight_copies_.prepared(this->records_for_backward(), "Linear");
  }

 private:
  index_t in_features_, out_features_;
  detail::WeightCopies weight_copies_;
};

}  // namespace eigenformer::nn
