// The module tree as layers use it: a composite written with one register_members line per member, checked
// against what PyTorch reports for its twin (tests/data/nn_module.json, tools/reference/make_module_fixtures.py):
// names and order of parameters, buffers and modules, and the printed repr. Then the behaviour the base
// promises: train()/eval() reach every descendant, lazy gradients, requires_grad_, zero_grad, apply, and
// forwards that write nothing unless they record for backward.
#include <doctest/doctest.h>

#include <eigenformer/nn/activation.hpp>
#include <eigenformer/nn/dropout.hpp>
#include <eigenformer/nn/embedding.hpp>
#include <eigenformer/nn/layernorm.hpp>
#include <eigenformer/nn/linear.hpp>
#include <eigenformer/nn/module_list.hpp>
#include <eigenformer/nn/self_attention.hpp>
#include <eigenformer/nn/transformer_block.hpp>
#include <eigenformer/nn/feedforward.hpp>
#include <eigenformer/nn/sequential.hpp>
#include <eigenformer/train/losses.hpp>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace nn = ef::nn;
using ids_t = std::int64_t;

namespace {

const json& module_case(const std::string& name) {
  static const json file = load_fixture("nn_module.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("nn_module.json: no case named " + name);
}

std::string torch_repr(const std::string& name) { return module_case("repr_" + name).at("repr").get<std::string>(); }

// The composite of make_module_fixtures.py, member for member.
template <typename T>
struct Block : nn::Module<T> {
  nn::LayerNorm<T> ln{4};
  nn::Linear<T> fc{4, 4};
  nn::Dropout<T> drop{0.1};

  std::string type_name() const override { return "Block"; }
  void register_members(nn::Members<T>& m) override {
    m.child("ln", ln);
    m.child("fc", fc);
    m.child("drop", drop);
  }
  ef::Tensor<T, 3> forward(const ef::Tensor<T, 3>& x) const { return drop.forward(fc.forward(ln.forward(x))); }
  ef::Tensor<T, 3> backward(const ef::Tensor<T, 3>& g) { return ln.backward(fc.backward(drop.backward(g))); }
};

template <typename T>
struct Composite : nn::Module<T> {
  ef::Tensor<T, 2> mask = ef::ones<T>(ef::Shape<2>{2, 2});
  ef::Tensor<T, 1> scratch = ef::zeros<T>(ef::Shape<1>{3});
  nn::Embedding<T> wte{10, 4, 0};
  nn::ModuleList<Block<T>> h;
  nn::Linear<T> head{4, 3, false};
  nn::GELU<T> act{nn::GeluApproximate::tanh};

  Composite() {
    h.emplace_back();
    h.emplace_back();
  }

  std::string type_name() const override { return "Composite"; }
  void register_members(nn::Members<T>& m) override {
    m.buffer("mask", mask);
    m.buffer("scratch", scratch, false);
    m.child("wte", wte);
    m.child("h", h);
    m.child("head", head);
    m.child("act", act);
  }

  ef::Tensor<T, 3> forward(const ef::Tensor<ids_t, 2>& ids) const {
    auto x = wte.forward(ids);
    for (const auto& block : h) x = block.forward(x);
    return act.forward(head.forward(x));
  }
  void backward(const ef::Tensor<T, 3>& g) {
    auto gx = head.backward(act.backward(g));
    for (auto it = h.rbegin(); it != h.rend(); ++it) gx = it->backward(gx);
    wte.backward(gx);
  }
};

const ef::Tensor<ids_t, 2> ids{{1, 2, 3}, {4, 0, 9}};

}  // namespace

TEST_CASE("module tree: the composite's names, shapes, buffers and modules are PyTorch's (fixture)") {
  const auto& c = module_case("composite");
  Composite<float> m;

  std::vector<std::pair<std::string, std::vector<index_t>>> params, buffers;
  for (const auto& p : m.named_parameters()) params.emplace_back(p.name, p.shape);
  for (const auto& b : m.named_buffers()) buffers.emplace_back(b.name, b.shape);
  CHECK(params == c.at("named_parameters").get<decltype(params)>());
  CHECK(buffers == c.at("named_buffers").get<decltype(buffers)>());

  // The state dict holds the persistent buffers and the parameters; the composite's buffers are its own
  // and it has no parameters of its own, so PyTorch lists those buffers first.
  std::vector<std::string> state_keys;
  for (const auto& b : m.named_buffers())
    if (b.persistent) state_keys.push_back(b.name);
  for (const auto& p : m.named_parameters()) state_keys.push_back(p.name);
  CHECK(state_keys == c.at("state_dict_keys").get<std::vector<std::string>>());

  std::vector<std::pair<std::string, std::string>> modules;
  for (const auto& [name, module] : m.named_modules()) modules.emplace_back(name, module->type_name());
  CHECK(modules == c.at("named_modules").get<decltype(modules)>());

  CHECK(m.repr() == c.at("repr").get<std::string>());
  std::ostringstream printed;
  printed << m;
  CHECK(printed.str() == m.repr());
}

TEST_CASE("module tree: single layers print what PyTorch prints (fixture)") {
  CHECK(nn::Linear<float>(768, 3072).repr() == torch_repr("linear"));
  CHECK(nn::Linear<float>(3, 2, false).repr() == torch_repr("linear_no_bias"));
  CHECK(nn::Embedding<float>(30522, 768, 0).repr() == torch_repr("embedding_padding"));
  CHECK(nn::Embedding<float>(10, 4, -1).repr() == torch_repr("embedding_negative_padding"));
  CHECK(nn::Embedding<float>(50257, 768).repr() == torch_repr("embedding"));
  CHECK(nn::Dropout<float>(0.1).repr() == torch_repr("dropout"));
  CHECK(nn::Dropout<float>().repr() == torch_repr("dropout_default"));
  CHECK(nn::LayerNorm<float>(768).repr() == torch_repr("layernorm"));
  CHECK(nn::LayerNorm<float>(12, 1e-12, false).repr() == torch_repr("layernorm_plain"));
  CHECK(nn::GELU<float>().repr() == torch_repr("gelu"));
  CHECK(nn::GELU<float>("tanh").repr() == torch_repr("gelu_tanh"));
  CHECK(nn::ReLU<float>().repr() == torch_repr("relu"));
  CHECK(nn::Softmax<float>(-1).repr() == torch_repr("softmax"));
  CHECK(nn::Sequential{nn::Linear<float>(4, 5), nn::ReLU<float>(), nn::Linear<float>(5, 2)}.repr() ==
        torch_repr("sequential"));
  CHECK(nn::MSELoss<float>().repr() == torch_repr("mse_loss"));
  CHECK(nn::CrossEntropyLoss<float>().repr() == torch_repr("cross_entropy_loss"));
}

TEST_CASE("module tree: ModuleList names its elements by index under the owner's name") {
  struct Stack : nn::Module<float> {
    nn::ModuleList<nn::Linear<float>> h;
    std::string type_name() const override { return "Stack"; }
    void register_members(nn::Members<float>& m) override { m.child("h", h); }
  } stack;
  stack.h.emplace_back(3, 3);
  stack.h.emplace_back(3, 2, false);
  std::vector<std::string> names;
  for (const auto& p : stack.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"h.0.weight", "h.0.bias", "h.1.weight"});
  CHECK(stack.h.named_parameters().at(0).name == "0.weight");  // the list alone: no owner prefix
  CHECK(stack.named_modules().at(1).first == "h");
  CHECK(stack.named_modules().at(2).first == "h.0");
}

TEST_CASE("module tree: train() and eval() reach every descendant") {
  Composite<float> m;
  for (const auto& entry : m.named_modules()) CHECK(entry.second->is_training());
  m.eval();
  for (const auto& entry : m.named_modules()) {
    INFO(entry.first);
    CHECK_FALSE(entry.second->is_training());
  }
  CHECK_FALSE(m.h[1].drop.is_training());
  m.train();
  for (const auto& entry : m.named_modules()) CHECK(entry.second->is_training());
}

TEST_CASE("module tree: gradients are allocated by the first backward; zero_grad keeps them, zeroed") {
  ef::manual_seed(1);
  Composite<double> m;
  for (const auto& p : m.named_parameters()) {
    INFO(p.name);
    CHECK_FALSE(p.has_grad());
    CHECK(p.grad().numel() == 0);
  }
  CHECK(m.head.weight.grad().numel() == 0);
  m.zero_grad();  // nothing to zero, and nothing allocated by it
  CHECK_FALSE(m.head.weight.has_grad());

  m.backward(m.forward(ids));
  for (const auto& p : m.named_parameters()) {
    INFO(p.name);
    CHECK(p.has_grad());
    CHECK(p.grad().numel() == p.data.numel());
  }
  CHECK(m.head.weight.grad().shape() == m.head.weight.shape());
  CHECK(ef::sum(ef::abs(m.head.weight.grad())).item() > 0.0);

  m.zero_grad();
  for (const auto& p : m.named_parameters()) {
    INFO(p.name);
    CHECK(p.has_grad());
    CHECK(ef::sum(ef::abs(p.grad())).item() == 0.0);
  }
}

TEST_CASE("module tree: a frozen child gets no gradient while the others do, and the input gradient still flows") {
  ef::manual_seed(2);
  Composite<double> m;
  m.h[0].fc.requires_grad_(false);
  CHECK_FALSE(m.h[0].fc.weight.requires_grad());
  CHECK(m.h[1].fc.weight.requires_grad());
  m.backward(m.forward(ids));
  for (const auto& p : m.named_parameters()) {
    INFO(p.name);
    const bool frozen = p.name.starts_with("h.0.fc.");
    CHECK(p.requires_grad() == !frozen);
    CHECK(p.has_grad() == !frozen);
  }
  // wte lies before the frozen layer: its gradient came through h.0.fc's input gradient.
  CHECK(ef::sum(ef::abs(m.wte.weight.grad())).item() > 0.0);

  m.requires_grad_(false);
  for (const auto& p : m.named_parameters()) CHECK_FALSE(p.requires_grad());
  m.requires_grad_(true);
  for (const auto& p : m.named_parameters()) CHECK(p.requires_grad());
}

TEST_CASE("module tree: apply visits every descendant, then the module itself") {
  Composite<float> m;
  std::vector<std::string> visited;
  m.apply([&](nn::Module<float>& x) { visited.push_back(x.type_name()); });
  CHECK(visited.size() == m.named_modules().size());
  CHECK(visited.front() == "Embedding");
  CHECK(visited.back() == "Composite");
  // The usual use: freeze every LayerNorm.
  m.apply([](nn::Module<float>& x) {
    if (x.type_name() == "LayerNorm") x.requires_grad_(false);
  });
  for (const auto& p : m.named_parameters()) CHECK(p.requires_grad() == (p.name.find(".ln.") == std::string::npos));
}

TEST_CASE("module tree: only a recording forward saves; eval and InferenceMode forwards write nothing") {
  ef::manual_seed(3);
  nn::Linear<double> lin(4, 3);
  const auto x1 = ef::randn<double>({2, 4});
  const auto x2 = ef::randn<double>({5, 4});
  const auto g = ef::randn<double>({2, 3});

  // The reference: forward x1, backward g.
  lin.forward(x1);
  const auto dx_ref = lin.backward(g);
  const auto dw_ref = lin.weight.grad().clone();
  lin.zero_grad();

  // A forward inside InferenceMode, between the recording forward and its backward, neither consumes nor
  // replaces the saved input: backward still differentiates the x1 forward.
  lin.forward(x1);
  {
    ef::InferenceMode guard;
    CHECK(ef::InferenceMode::is_enabled());
    const auto y2 = lin.forward(x2);
    CHECK(y2.shape() == ef::Shape<2>{5, 3});
  }
  CHECK_FALSE(ef::InferenceMode::is_enabled());
  const auto dx = lin.backward(g);
  CHECK(dx.to_vector() == dx_ref.to_vector());
  CHECK(lin.weight.grad().to_vector() == dw_ref.to_vector());

  // In training mode under InferenceMode nothing is saved, so there is nothing to differentiate.
  lin.train();
  {
    ef::InferenceMode guard;
    lin.forward(x1);
  }
  CHECK_THROWS_WITH_EXACTLY(lin.backward(g), doctest::Contains("Linear.backward: nothing saved"), std::logic_error);

  // eval() drops what the last training forward saved: no backward can follow.
  lin.forward(x1);
  lin.eval();
  CHECK_THROWS_EXACTLY(lin.backward(g), std::logic_error);

  // An eval-mode forward needs only a const module: several threads may share one.
  const nn::Linear<double>& shared = lin;
  const auto y = shared.forward(x1);
  CHECK(y.shape() == ef::Shape<2>{2, 3});
  CHECK_THROWS_EXACTLY(lin.backward(g), std::logic_error);
}

TEST_CASE("module tree: under InferenceMode a training-mode Dropout still drops, but saves no mask") {
  nn::Dropout<float> drop(0.5);
  ef::Generator gen(7);
  ef::Tensor<float, 1> y;
  {
    ef::InferenceMode guard;
    ef::GeneratorGuard use(gen);
    y = drop.forward(ef::ones<float>({64}));
  }
  const auto v = y.to_vector();
  CHECK(std::count(v.begin(), v.end(), 0.f) > 0);
  CHECK_THROWS_EXACTLY(drop.backward(ef::ones<float>({64})), std::logic_error);
}

TEST_CASE("module tree: the attention family prints what its PyTorch twins print (fixture)") {
  namespace tut = ef::nn::tutorial;
  CHECK(nn::MultiHeadAttention<float>(12, 3).repr() == torch_repr("multi_head_attention"));
  CHECK(tut::MultiHeadAttentionPerHead<float>(6, 2).repr() == torch_repr("multi_head_attention_per_head"));
  CHECK(tut::SelfAttentionV1<float>(3, 2).repr() == torch_repr("self_attention_v1"));
  CHECK(tut::SelfAttentionV2<float>(3, 2).repr() == torch_repr("self_attention_v2"));
  CHECK(tut::CausalAttention<float>(3, 2, 6, 0.3).repr() == torch_repr("causal_attention"));
  CHECK(nn::FeedForward<float>(12, 16).repr() == torch_repr("feedforward"));
  CHECK(nn::TransformerBlock<float>(12, 3, 16).repr() == torch_repr("transformer_block"));
}
