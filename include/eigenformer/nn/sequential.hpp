// nn.Sequential for a fixed list of layers: forward runs them in order, backward in reverse, and parameters
// are named by position ("0.weight", "1.bias", ...) as in PyTorch. The layer types are part of the type,
// so each forward keeps its own ranks and nothing is virtual:
//
//   nn::Sequential block{nn::Linear<float>(3, 3), nn::GELU<float>(nn::GeluApproximate::tanh)};
//
// Build it with braces as above: a braced list evaluates its elements left to right, so the layers draw
// their initial weights in the order written, like PyTorch (a parenthesised call leaves the order unspecified).
#pragma once

#include <string>
#include <tuple>
#include <utility>

#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

namespace detail {
template <floating_element T>
T module_scalar(const Module<T>&);
template <class M>
using module_scalar_t = decltype(module_scalar(std::declval<const M&>()));
}  // namespace detail

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

  template <class X>
  auto forward(const X& x) { return forward_from<0>(x); }

  template <class G>
  decltype(auto) backward(const G& grad_output) { return backward_from<sizeof...(Layers) - 1>(grad_output); }

  void collect_parameters(const std::string& prefix, ParameterList<T>& out) override {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (std::get<I>(layers_).collect_parameters(prefix + std::to_string(I) + ".", out), ...);
    }(std::index_sequence_for<Layers...>{});
  }

 protected:
  void set_children_training(bool mode) override {
    std::apply([mode](auto&... layer) { (layer.train(mode), ...); }, layers_);
  }

 private:
  template <std::size_t I, class X>
  auto forward_from(const X& x) {
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
Sequential(First, Rest...) -> Sequential<detail::module_scalar_t<First>, First, Rest...>;

}  // namespace eigenformer::nn
