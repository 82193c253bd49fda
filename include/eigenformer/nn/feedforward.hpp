// The position-wise feed-forward network of a Transformer block (BERT-from-scratch listing 1.32):
// Linear(C -> H) -> activation -> Dropout -> Linear(H -> C) -> Dropout, applied to every token alike.
//
// Parameter names follow the seed's nn.Sequential, so its state dicts load as they are:
//   net.0.weight (H, C), net.0.bias (H), net.3.weight (C, H), net.3.bias (C)
// (indices 1, 2 and 4 are the parameterless activation and dropouts). Hugging Face checkpoints name the same
// two Linears differently (BERT: intermediate.dense / output.dense; DistilBERT: ffn.lin1 / ffn.lin2; GPT-2:
// mlp.c_fc / mlp.c_proj, stored transposed), so a loader maps those names onto net.0 / net.3.
#pragma once

#include <string>
#include <string_view>

#include "eigenformer/nn/activation.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

template <floating_element T>
class FeedForward : public Module<T> {
 public:
  // hidden = 0 means 4 * dim. `activation` is a Hugging Face hidden_act name ("gelu", "gelu_new",
  // "gelu_pytorch_tanh", "relu") choosing the function; it prints as the torch.nn module the seed's
  // Sequential holds (GELU(approximate='none') for "gelu"), since this is the tutorial's block. The two Linears
  // are initialised from `gen` in order (fc1 weight, bias, fc2 weight, bias); the dropouts draw their masks
  // from current_generator() in forward order.
  FeedForward(index_t dim, index_t hidden = 0, double dropout = 0.1, std::string_view activation = "gelu",
              Generator& gen = default_generator())
      : fc1(dim, hidden == 0 ? 4 * dim : hidden, true, gen),
        act(activation_kind(activation)),
        drop1(dropout),
        fc2(hidden == 0 ? 4 * dim : hidden, dim, true, gen),
        drop2(dropout) {}

  Linear<T> fc1;        // net.0: (C -> H)
  Activation<T> act;    // net.1
  Dropout<T> drop1;     // net.2
  Linear<T> fc2;        // net.3: (H -> C)
  Dropout<T> drop2;     // net.4

  index_t dim() const noexcept { return fc1.in_features(); }
  index_t hidden() const noexcept { return fc1.out_features(); }

  std::string type_name() const override { return "FeedForward"; }
  void register_members(Members<T>& m) override {
    net_.owner = this;  // refreshed on every walk, so a moved FeedForward never leaves it dangling
    m.child("net", net_);
  }

  // (..., C) -> (..., C)
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    if (fuses(x)) {
      // Inference with both dropouts the identity: fc1's bias and the activation applied in its product's
      // epilogue (one pass over the wide hidden layer, where the layers one by one make three), with the
      // same bits (backend::activate is the one expression for both), and the hidden rows laid out for fc2's
      // product to read (detail::dense_hidden_product).
      Tensor<T, 2> rows;
      if constexpr (R == 2) rows = x;
      else rows = x.reshape(Shape<2>{x.numel() / dim(), dim()});
      const backend::Epilogue<T> epilogue{&fc1.bias->data, epilogue_activation(act.kind())};
      const auto h = detail::dense_hidden_product(rows, fc1.weight.data.t(), fc1.prepared_weight(), epilogue);
      return fc2.forward(h).view(x.shape());
    }
    auto h = drop1.forward(act.forward(fc1.forward(x)));  // (..., H)
    return drop2.forward(fc2.forward(h));                 // (..., C)
  }

  // Whether forward runs fused: nothing records for backward, no dropout draws a mask, fc1 has its bias (as
  // constructed) and x is (..., C).
  template <std::size_t R>
  bool fuses(const Tensor<T, R>& x) const {
    const auto identity = [](const Dropout<T>& d) { return !d.is_training() || d.p() == 0.0; };
    const bool records = !InferenceMode::is_enabled() && (fc1.is_training() || act.is_training() || fc2.is_training());
    return !records && identity(drop1) && identity(drop2) && fc1.bias.has_value() && x.shape()[R - 1] == dim() &&
           x.numel() > 0;
  }

  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    auto gh = fc2.backward(drop2.backward(grad_output));   // (..., H)
    return fc1.backward(act.backward(drop1.backward(gh)));  // (..., C)
  }

 private:
  // The seed's `self.net = nn.Sequential(...)`: only a naming level here ("net.0.weight", and the repr
  // FeedForward((net): Sequential((0): Linear(...) ...))), over the five layers above, which stay plain
  // members so callers can write ff.fc2.
  struct Net : Module<T> {
    FeedForward* owner = nullptr;
    std::string type_name() const override { return "Sequential"; }
    void register_members(Members<T>& m) override {
      m.child("0", owner->fc1);
      m.child("1", owner->act);
      m.child("2", owner->drop1);
      m.child("3", owner->fc2);
      m.child("4", owner->drop2);
    }
  };
  Net net_;
};

}  // namespace eigenformer::nn
