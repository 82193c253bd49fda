// The shortcut network of BERT-from-scratch section 1.19 (LLMs-from-scratch ch. 4 ExampleDeepNeuralNetwork):
// five Linear + GELU(tanh) layers of sizes [3, 3, 3, 3, 3, 1], with and without shortcut connections, built
// from nn::Sequential. Its mean absolute weight gradients must reproduce the book's (worked example
// shortcut_gradients) and PyTorch's (nn_layers.json).
#include <doctest/doctest.h>

#include <map>

#include <eigenformer/nn/activation.hpp>
#include <eigenformer/nn/linear.hpp>
#include <eigenformer/nn/module_list.hpp>
#include <eigenformer/nn/sequential.hpp>
#include <eigenformer/train/losses.hpp>

#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"

using namespace eftest;
namespace nn = ef::nn;

namespace {

template <typename T>
using LinearGelu = nn::Sequential<T, nn::Linear<T>, nn::GELU<T>>;

// x = x + layer(x) where the shapes allow it (use_shortcut), else x = layer(x). A module whose one child is
// the ModuleList "layers", so parameters are named "layers.0.0.weight" as model.named_parameters() names
// them in the book.
template <typename T>
struct ShortcutNet : nn::Module<T> {
  nn::ModuleList<LinearGelu<T>> layers;
  std::vector<bool> shortcut;  // which layers add their input to their output (known from the sizes)

  ShortcutNet(const std::vector<index_t>& sizes, bool use_shortcut) {
    for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
      layers.push_back(LinearGelu<T>{nn::Linear<T>(sizes[i], sizes[i + 1]), nn::GELU<T>(nn::GeluApproximate::tanh)});
      shortcut.push_back(use_shortcut && sizes[i] == sizes[i + 1]);
    }
  }
  std::string type_name() const override { return "ExampleDeepNeuralNetwork"; }
  void register_members(nn::Members<T>& m) override { m.child("layers", layers); }

  ef::Tensor<T, 2> forward(ef::Tensor<T, 2> x) const {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const auto out = layers[i].forward(x);
      x = shortcut[i] ? x + out : out;
    }
    return x;
  }
  ef::Tensor<T, 2> backward(ef::Tensor<T, 2> g) {
    for (std::size_t i = layers.size(); i-- > 0;) {
      const auto through = layers[i].backward(g);
      g = shortcut[i] ? g + through : through;
    }
    return g;
  }
};

// The book's print_gradients: MSE against [[0]] for the input [[1, 0, -1]], after manual_seed(123).
std::map<std::string, double> mean_abs_weight_grads(bool use_shortcut) {
  ef::manual_seed(123);
  ShortcutNet<float> net({3, 3, 3, 3, 3, 1}, use_shortcut);
  nn::MSELoss<float> loss;
  const auto out = net.forward(ef::tensor<float>({{1.f, 0.f, -1.f}}));
  loss.forward(out, ef::tensor<float>({{0.f}}));
  net.backward(loss.backward());
  std::map<std::string, double> m;
  for (auto& p : net.named_parameters())
    if (p.name.ends_with("weight")) m[p.name] = ef::mean(ef::abs(p.grad())).item();
  return m;
}

}  // namespace

// The worked example prints 8 decimals, so the comparison is to 1e-5 relative or half a unit in the 8th
// decimal (5e-9), whichever is larger: 0.00012011 is only known to 4e-5 relative. Against the fixture
// (PyTorch's own float32 gradients, recorded in full) it is 1e-5 relative throughout.
TEST_CASE("shortcut network: mean |weight gradient| per layer, with and without shortcuts (worked example)") {
  const auto& ex = worked_examples().at("shortcut_gradients").at("mean_abs_weight_grad");
  for (const bool shortcut : {false, true}) {
    INFO("use_shortcut " << shortcut);
    const auto got = mean_abs_weight_grads(shortcut);
    const auto& expected = ex.at(shortcut ? "with_shortcut" : "without_shortcut");
    REQUIRE(got.size() == expected.size());
    const auto& fixture = nn_case(shortcut ? "shortcut_with" : "shortcut_without").at("mean_abs_weight_grad");
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      INFO(it.key());
      REQUIRE(got.count(it.key()) == 1);
      const double g = got.at(it.key()), e = it.value().get<double>(), f = fixture.at(it.key()).get<double>();
      CHECK(std::abs(g - e) <= std::max(1e-5 * std::abs(e), 5e-9));
      CHECK(std::abs(g - f) <= 1e-5 * std::abs(f));
      if (std::getenv("EIGENFORMER_REPORT_ERRORS"))
        std::cout << "[fixture error] shortcut " << shortcut << " " << it.key() << ": " << g << " vs PyTorch " << f
                  << " (rel " << std::abs(g - f) / f << ")\n";
    }
  }
}

// Weights, output and every gradient against the recorded PyTorch run (float32 through 5 tiny layers:
// 1e-5 relative, with a 1e-9 absolute floor for the vanishing gradients of the first layers).
TEST_CASE("shortcut network: seeded weights, output and all gradients match PyTorch (fixtures)") {
  for (const char* name : {"shortcut_without", "shortcut_with"}) {
    const auto& c = nn_case(name);
    ef::manual_seed(c.at("seed").get<std::uint64_t>());
    ShortcutNet<float> net(c.at("config").at("layer_sizes").get<std::vector<index_t>>(),
                           c.at("config").at("use_shortcut").get<bool>());
    for (auto& p : net.named_parameters()) {  // the fixture ran the same FMA kernels: the init is bit-exact
      json flat = c.at("params").at(p.name);
      flat["shape"] = std::vector<index_t>{p.data.numel()};
      check_fixture(p.data, flat, 0, 0, std::string(name) + " init " + p.name);
    }
    nn::MSELoss<float> loss;
    const auto out = net.forward(fx<float, 2>(c.at("inputs").at("x")));
    check_fixture(out, c.at("out"), 1e-5, 0, std::string(name) + " forward");
    check_fixture(loss.forward(out, fx<float, 2>(c.at("inputs").at("target"))), c.at("loss"), 1e-5, 0,
                  std::string(name) + " loss");
    net.backward(loss.backward());
    for (auto& p : net.named_parameters()) {
      json flat = c.at("grads").at(p.name);
      flat["shape"] = std::vector<index_t>{p.grad().numel()};
      check_fixture(p.grad(), flat, 1e-5, 1e-9, std::string(name) + " d" + p.name);
    }
  }
}

TEST_CASE("Sequential: runs layers in order, backward in reverse, names parameters by position") {
  ef::manual_seed(14);
  nn::Sequential seq{nn::Linear<double>(4, 5), nn::ReLU<double>(), nn::Linear<double>(5, 2)};
  static_assert(decltype(seq)::size() == 3);
  std::vector<std::string> names;
  for (const auto& p : seq.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  auto x = ef::randn<double>({3, 4});
  const auto probe = ef::randn<double>({3, 2});
  auto f = [&] {
    seq.eval();
    auto y = seq.forward(x);
    seq.train();
    return y;
  };
  CHECK(seq.get<1>().is_training());
  seq.forward(x);
  const auto dx = seq.backward(probe);
  check_tensors_close(dx, numerical_gradient(f, x, probe), 1e-6, 1e-9, "dx");
  for (auto& p : seq.named_parameters())
    check_tensors_close(p.grad(), numerical_gradient(f, p.data, probe), 1e-6, 1e-9, p.name);
  seq.eval();
  CHECK_FALSE(seq.get<2>().is_training());
}
