// nn.Sequential for a fixed list of layers: forward runs them in order, backward in reverse, and the layers
// are children "0", "1", ... so parameters are named "0.weight", "1.bias", ... and the repr lists them as
// PyTorch does. The layer types are part of the type, so each forward keeps its own ranks and nothing is
// virtual:
//
//   nn::Sequential block{nn::Linear<float>(3, 3), nn::GELU<float>(nn::GeluApproximate::tanh)};
//
// Build it with braces as above: a braced list evaluates its elements left to right, so the layers draw
// their initial weights in the order written, like PyTorch (a parenthesised call leaves the order unspecified).
#pragma once

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "eigenformer/nn/module.hpp"
#include "eigenformer/nn/module_list.hpp"

namespace eigenformer::nn {

template <floating_element T, class... Layers>
class Sequential : public Module<T> {
  static_assert(sizeof...(Layers) > 0, "Sequential: needs at least one layer");
  static_assert((std::is_base_of_v<Module<T>, Layers> && ...), "Sequential: every layer must be a Module<T>");

 public:
  explicit Sequential(Layers&&... layers) : layers_(std::move(layers)...) {}

  static constexpr std::size_t size() noexcept { return sizeof...(Layers); }

  // The I-th layer (seq[I] in PyTorch).
  template <std::size_t I>
  auto& get() noexcept { return std::get<I>(layers_); }
  template <std::size_t I>
  const auto& get() const noexcept { return std::get<I>(layers_); }

  std::string type_name() const override { return "Sequential"; }
  void register_members(Members<T>& m) override {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (m.child(std::to_string(I), std::get<I>(layers_)), ...);
    }(std::index_sequence_for<Layers...>{});
  }

  template <class X>
  auto forward(const X& x) const { return forward_from<0>(x); }

  template <class G>
  decltype(auto) backward(const G& grad_output) { return backward_from<sizeof...(Layers) - 1>(grad_output); }

 private:
  template <std::size_t I, class X>
  auto forward_from(const X& x) const {
    if constexpr (I + 1 == sizeof...(Layers)) return std::get<I>(layers_).forward(x);
    else return forward_from<I + 1>(std::get<I>(layers_).forward(x));
  }
  template <std::size_t I, class G>
  decltype(auto) backward_from(const G& g) {
    if constexpr (I == 0) return std::get<0>(layers_).backward(g);
    else return backward_from<I - 1>(std::get<I>(layers_).backward(g));
  }

  std::tuple<Layers...> layers_;
};

template <class First, class... Rest>
Sequential(First, Rest...) -> Sequential<module_element_t<First>, First, Rest...>;

}  // namespace eigenformer::nn
