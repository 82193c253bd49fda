// GPT-2's "Conv1D" (Hugging Face transformers.pytorch_utils.Conv1D): a fully connected layer y = x W + b whose
// weight is stored (in_features, out_features), the transpose of nn.Linear's. Despite the name it is no
// convolution; OpenAI's original TensorFlow code used a 1x1 convolution, and Hugging Face kept its weight
// layout so GPT-2 checkpoints load without transposes. eigenformer keeps it for the same reason: a GPT-2
// safetensors tensor maps onto `weight` byte for byte. The computation is Linear's (linear.hpp, detail::dense_*)
// with the other weight layout.
#pragma once

#include <optional>

#include <string>

#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/random.hpp"

namespace eigenformer::nn {

template <floating_element T>
class Conv1D : public Module<T> {
 public:
  // Initialised as Hugging Face's GPT-2 does (_init_weights): weight ~ N(0, weight_std) drawn from `gen`,
  // bias zeros. weight_std = 0 leaves the weight at zeros and draws nothing (for loading checkpoints).
  Conv1D(index_t in_features, index_t out_features, double weight_std = 0.02, Generator& gen = default_generator())
      : in_features_(in_features), out_features_(out_features) {
    if (in_features <= 0 || out_features <= 0)
      throw std::invalid_argument("Conv1D: in_features and out_features must be positive, got " +
                                  std::to_string(in_features) + " and " + std::to_string(out_features));
    // Zeros to be overwritten by a checkpoint take memory only as the load writes them (untouched_zeros).
    weight = Parameter<T, 2>(weight_std > 0.0 ? zeros<T>(Shape<2>{in_features, out_features})
                                              : eigenformer::detail::untouched_zeros<T>(Shape<2>{in_features, out_features}));
    bias = Parameter<T, 1>(zeros<T>(Shape<1>{out_features}));
    if (weight_std > 0.0) normal_(weight.data, 0.0, weight_std, gen);
  }

  Parameter<T, 2> weight;  // (in, out): Hugging Face's layout
  Parameter<T, 1> bias;    // (out)

  index_t in_features() const noexcept { return in_features_; }
  index_t out_features() const noexcept { return out_features_; }

  // Hugging Face's Conv1D defines no extra_repr, so a GPT-2 model prints its layers as "Conv1D()".
  std::string type_name() const override { return "Conv1D"; }
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
    auto y = detail::dense_forward("Conv1D", x, weight.data, &bias.data, detail::DenseLayout::in_out,
                                   ctx ? &*ctx : nullptr, prepared_weight());
    if (ctx) this->save_for_backward(std::move(*ctx));
    return y;
  }

  // dL/dx = g W^T; accumulates dL/dW += x^T g and dL/db += sum of g over all leading dims.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<detail::DenseContext<T>>("Conv1D");
    return detail::dense_backward("Conv1D", grad_output, ctx, weight, &bias, detail::DenseLayout::in_out);
  }

  // bfloat16 weight storage for inference, as Linear::to_bf16_weights (tensor/bf16.hpp).
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    weight_copies_.to_bf16(weight, detail::DenseLayout::in_out, floats);
  }
  // The bfloat16 copy, or null before to_bf16_weights().
  const Bf16Matrix* bf16_weight() const noexcept { return weight_copies_.bf16(); }

  // The weight also in the packed kernel's order, or only in it (FloatWeights::release), as
  // Linear::pack_weights (tensor/packed_matrix.hpp).
  void pack_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    weight_copies_.pack(weight, detail::DenseLayout::in_out, floats);
  }
  // Drops the packed copy, as Linear::unpack_weights.
  void unpack_weights() {
    if constexpr (std::is_same_v<T, float>) weight_copies_.unpack(weight, detail::DenseLayout::in_out);
  }
  // The packed copy, or null before pack_weights() (or where there is no packed kernel: backend::cpu_isa()).
  const PackedMatrix* packed_weight() const noexcept { return weight_copies_.packed(); }
  // The copies an inference product may read (none while recording for backward), as Linear's.
  detail::PreparedWeight prepared_weight() const {
    return weight_copies_.prepared(this->records_for_backward(), "Conv1D");
  }

 private:
  index_t in_features_, out_features_;
  detail::WeightCopies weight_copies_;
};

}  // namespace eigenformer::nn
