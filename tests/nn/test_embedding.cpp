// nn::Embedding, BertEmbeddings and the positional-embedding layers: PyTorch fixtures (init, forward, scatter-add
// gradients, dropout in training mode), finite differences, padding_idx, bad ids.
#include <doctest/doctest.h>

#include <eigenformer/nn/embedding.hpp>
#include <eigenformer/nn/positional_encoding.hpp>

#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"
#include "support/thread_counts.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace nn = ef::nn;
using ids_t = std::int64_t;

namespace {
std::optional<index_t> optional_index(const json& v) {
  return v.is_null() ? std::nullopt : std::optional<index_t>(v.get<index_t>());
}

// The module's parameters right after a seeded construction against the recorded ones: this checks that
// the tables draw from the stream in PyTorch's order. The fixtures ran ATen's portable scalar kernels, whose
// N(0, 1) fill rounds differently from the AVX2 kernels eigenformer reproduces (rng.json, test_random.cpp):
// no fused multiply-add, other float log/cos. Values agree to 2e-5 relative (Box-Muller's sqrt(-2 log u)
// amplifies rounding where u is near 1); a wrong draw order would differ by O(1).
template <typename T>
void check_init(nn::Module<T>& m, const json& c) {
  for (auto& p : m.named_parameters()) {
    json flat = c.at("params").at(p.name);
    flat["shape"] = std::vector<index_t>{p.data.numel()};
    check_fixture(p.data, flat, 1e-4, 1e-5, c.at("name").get<std::string>() + " init " + p.name);
  }
}
}  // namespace

// A lookup copies rows and the scatter-add sums at most 3 float terms per element: forward is exact and the
// gradients agree to a float ulp (1e-6 relative, 1e-7 absolute).
TEST_CASE("Embedding: init, forward and scatter-add backward match PyTorch (fixtures, float32)") {
  for (const char* name : {"embedding_pad3", "embedding_rank1"}) {
    const auto& c = nn_case(name);
    const auto& cfg = c.at("config");
    ef::manual_seed(c.at("seed").get<std::uint64_t>());
    nn::Embedding<float> emb(cfg.at("num_embeddings").get<index_t>(), cfg.at("embedding_dim").get<index_t>(),
                             optional_index(cfg.at("padding_idx")));
    check_init(emb, c);
    load_params(emb, c);
    const auto& ids_json = c.at("inputs").at("ids");
    const auto probe_json = c.at("probe");
    if (shape_of(ids_json).size() == 2) {
      const auto ids = fx<ids_t, 2>(ids_json);
      check_fixture(emb.forward(ids), c.at("out"), 0, 0, std::string(name) + " forward");
      emb.backward(fx<float, 3>(probe_json));
    } else {
      const auto ids = fx<ids_t, 1>(ids_json);
      check_fixture(emb.forward(ids), c.at("out"), 0, 0, std::string(name) + " forward");
      emb.backward(fx<float, 2>(probe_json));
    }
    check_param_grads(emb, c, 1e-6, 1e-7);
  }
}

TEST_CASE("Embedding: the padding row starts at zero, is looked up as zero and never receives gradient") {
  ef::manual_seed(0);
  nn::Embedding<float> emb(10, 4, -1);  // padding_idx -1 is row 9, as in PyTorch
  REQUIRE(emb.padding_idx() == 9);
  CHECK(ef::sum(ef::abs(emb.weight.data.select(0, 9))).item() == 0.f);
  CHECK(ef::sum(ef::abs(emb.weight.data.select(0, 8))).item() > 0.f);
  const ef::Tensor<ids_t, 2> ids{{9, 1, 9}, {2, 9, 1}};
  const auto out = emb.forward(ids);  // (2, 3, 4)
  CHECK(ef::sum(ef::abs(out.select(0, 0).select(0, 0))).item() == 0.f);
  emb.backward(ef::ones<float>({2, 3, 4}));
  CHECK(ef::sum(ef::abs(emb.weight.grad().select(0, 9))).item() == 0.f);
  CHECK(emb.weight.grad()(1, 0) == 2.f);  // id 1 twice: gradients add up
  CHECK(emb.weight.grad()(2, 3) == 1.f);
  CHECK(emb.weight.grad()(0, 0) == 0.f);
}

TEST_CASE("Embedding: weight gradient matches central finite differences (double)") {
  ef::manual_seed(4);
  nn::Embedding<double> emb(7, 3, 2);
  const ef::Tensor<ids_t, 2> ids{{0, 2, 6, 0}, {5, 5, 1, 2}};
  const auto probe = ef::randn<double>({2, 4, 3});
  auto f = [&] {
    emb.eval();
    auto y = emb.forward(ids);
    emb.train();
    return y;
  };
  emb.forward(ids);
  emb.backward(probe);
  auto expected = numerical_gradient(f, emb.weight.data, probe);
  expected.select(0, 2).zero_();  // the padding row is frozen even though the lookup reads it
  check_tensors_close(emb.weight.grad(), expected, 1e-6, 1e-9, "dweight");
}

// Enough tokens that the scatter-add's columns are split between threads (backend::column_reduction_grain);
// each gradient element still receives its tokens' terms in token order, so 1 to 4 threads give the same
// bits. Ids from a vocabulary of 20, so that every row gathers many tokens.
TEST_CASE("Embedding: the scatter-add backward on 1 to 4 threads, the same bits") {
  ef::Generator gen(17);
  nn::Embedding<float> emb(20, 96, 0, gen);
  auto ids = ef::Tensor<ids_t, 2>::empty({6, 500});
  for (index_t i = 0; i < ids.numel(); ++i) ids.data()[i] = static_cast<ids_t>(gen.random() % 20);
  const auto probe = ef::randn<float>({6, 500, 96}, gen);
  REQUIRE(ef::backend::column_reduction_grain(96, 3000, 2) < 96);
  const auto one = check_same_bits_on_thread_counts([&] {
    emb.zero_grad();
    emb.forward(ids);
    emb.backward(probe);
    return emb.weight.grad().to_vector();
  });
  CHECK(one[5 * 96] != 0.0f);  // row 5 (not the padding row 0) received gradient
}

TEST_CASE("Embedding: bad ids and bad calls") {
  nn::Embedding<float> emb(11, 4);
  CHECK_THROWS_WITH_EXACTLY(emb.forward(ef::Tensor<ids_t, 2>{{1, 2, 3}, {4, 11, 0}}),
                       "Embedding.forward: id 11 at index [1, 1] is out of range for a vocabulary of size 11 "
                       "(valid ids are 0 to 10)",
                       std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(emb.forward(ef::tensor<ids_t>({-1})), doctest::Contains("id -1 at index [0]"), std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(emb.backward(ef::zeros<float>({2, 4})), doctest::Contains("Embedding.backward: nothing saved"),
                       std::logic_error);
  emb.forward(ef::tensor<ids_t>({1, 2}));
  CHECK_THROWS_WITH_EXACTLY(emb.backward(ef::zeros<float>({3, 4})),
                       "Embedding.backward: grad_output [3, 4] does not match the forward output [2, 4]", ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::Embedding<float>(4, 2, 4), std::out_of_range);  // padding_idx outside the table
  CHECK_THROWS_EXACTLY(nn::Embedding<float>(0, 2), std::invalid_argument);
}

// Word + position + token type, then LayerNorm (eps 1e-12) and, in training mode, dropout: the sums are
// exact up to float rounding and LayerNorm's statistics differ by float ulps (see test_layernorm.cpp), so
// 1e-5 relative with a 2e-6 absolute floor for O(1) values, in forward and in every gradient.
TEST_CASE("BertEmbeddings: init, forward (train with dropout, eval) and gradients match PyTorch (fixtures)") {
  for (const char* name : {"bert_embeddings_train", "bert_embeddings_eval"}) {
    const auto& c = nn_case(name);
    const auto& cfg = c.at("config");
    const nn::BertEmbeddingsOptions opt{
        .vocab_size = cfg.at("vocab_size").get<index_t>(),
        .hidden_size = cfg.at("hidden_size").get<index_t>(),
        .max_position_embeddings = cfg.at("max_position_embeddings").get<index_t>(),
        .type_vocab_size = cfg.at("type_vocab_size").get<index_t>(),
        .pad_token_id = optional_index(cfg.at("pad_token_id")),
        .layer_norm_eps = cfg.at("layer_norm_eps").get<double>(),
        .hidden_dropout_prob = cfg.at("hidden_dropout_prob").get<double>()};
    ef::manual_seed(c.at("seed").get<std::uint64_t>());
    nn::BertEmbeddings<float> emb(opt);
    check_init(emb, c);
    load_params(emb, c);
    const auto ids = fx<ids_t, 2>(c.at("inputs").at("input_ids"));
    const auto types = fx<ids_t, 2>(c.at("inputs").at("token_type_ids"));
    const bool train = c.at("train").get<bool>();
    emb.train(train);
    if (train) ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());
    check_fixture(emb.forward(ids, types), c.at("out"), 1e-5, 2e-6, std::string(name) + " forward");
    if (!train) continue;
    emb.backward(fx<float, 3>(c.at("probe")));
    check_param_grads(emb, c, 1e-5, 2e-6);
  }
}

TEST_CASE("BertEmbeddings: gradients match central finite differences (double, no dropout)") {
  ef::manual_seed(6);
  nn::BertEmbeddings<double> emb({.vocab_size = 9, .hidden_size = 5, .max_position_embeddings = 6,
                                  .type_vocab_size = 3, .pad_token_id = 0, .hidden_dropout_prob = 0.0});
  emb.layer_norm.weight->data.copy_(ef::randn<double>({5}) + 1.0);
  emb.layer_norm.bias->data.copy_(ef::randn<double>({5}));
  const ef::Tensor<ids_t, 2> ids{{3, 8, 1, 0}, {2, 2, 7, 0}};
  const ef::Tensor<ids_t, 2> types{{0, 0, 1, 2}, {0, 1, 1, 1}};
  const auto probe = ef::randn<double>({2, 4, 5});
  auto f = [&] {
    emb.eval();
    auto y = emb.forward(ids, types);
    emb.train();
    return y;
  };
  emb.forward(ids, types);
  emb.backward(probe);
  for (auto& p : emb.named_parameters()) {
    auto expected = numerical_gradient(f, p.data, probe);
    if (p.name == "word_embeddings.weight") expected.narrow(0, 0, 5).zero_();  // padding row 0 is frozen
    check_tensors_close(p.grad(), expected, 1e-6, 1e-9, p.name);
  }
}

TEST_CASE("BertEmbeddings: Hugging Face names, default segment, bad input") {
  ef::manual_seed(0);
  nn::BertEmbeddings<float> emb({.vocab_size = 20, .hidden_size = 8, .max_position_embeddings = 6});
  std::vector<std::string> names;
  for (const auto& p : emb.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"word_embeddings.weight", "position_embeddings.weight",
                                          "token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias"});
  CHECK(emb.word_embeddings.padding_idx() == 0);  // HF's pad_token_id default
  emb.eval();
  const ef::Tensor<ids_t, 2> ids{{5, 6, 7}};
  check_tensors_close(emb.forward(ids), emb.forward(ids, ef::zeros<ids_t>({1, 3})), 0, 0, "segment 0 by default");
  CHECK_THROWS_WITH_EXACTLY(emb.forward(ef::zeros<ids_t>({1, 7})),
                       "BertEmbeddings.forward: sequence length 7 exceeds max_position_embeddings 6", std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(emb.forward(ids, ef::zeros<ids_t>({1, 2})),
                       "BertEmbeddings.forward: token_type_ids [1, 2] and input_ids [1, 3] differ in shape",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(emb.forward(ids, ef::Tensor<ids_t, 2>{{0, 2, 0}}), doctest::Contains("id 2 at index [0, 1]"),
                       std::out_of_range);
  CHECK_THROWS_EXACTLY(emb.backward(ef::zeros<float>({1, 3, 8})), std::logic_error);
}

TEST_CASE("LearnedPositionalEmbedding and SinusoidalPositionalEncoding: add their first T rows") {
  ef::manual_seed(8);
  nn::LearnedPositionalEmbedding<double> pos(6, 4);
  nn::SinusoidalPositionalEncoding<double> sin(6, 4);
  auto x = ef::randn<double>({2, 3, 4});
  const auto probe = ef::randn<double>({2, 3, 4});
  {
    // Rows 2..4 of the table added to each sequence, element by element here rather than with the library's
    // own narrow and broadcasting add: one double addition each, so exactly equal.
    const auto y = pos.forward(x, 2).to_vector(), xv = x.to_vector(), w = pos.weight().data.to_vector();
    REQUIRE(y.size() == xv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const std::size_t t = (i / 4) % 3, j = i % 4;
      CHECK_MESSAGE(y[i] == xv[i] + w[(2 + t) * 4 + j], "learned forward, element " << i);
    }
  }
  check_tensors_close(pos.backward(probe), probe, 0, 0, "learned dx");
  auto f = [&] {
    pos.eval();
    auto y = pos.forward(x, 2);
    pos.train();
    return y;
  };
  check_tensors_close(pos.weight().grad(), numerical_gradient(f, pos.weight().data, probe), 1e-6, 1e-9, "dweight");
  CHECK(pos.named_parameters().at(0).name == "weight");

  check_tensors_close(sin.forward(x), x + ef::nn::sinusoidal_positional_encoding<double>(3, 4), 0, 0, "sin forward");
  check_tensors_close(sin.backward(probe), probe, 0, 0, "sin dx");
  CHECK(sin.named_parameters().empty());
  CHECK_THROWS_WITH_EXACTLY(sin.forward(x, 4), doctest::Contains("positions 4..6 exceed max_len 6"), std::out_of_range);
  CHECK_THROWS_EXACTLY(pos.forward(ef::zeros<double>({2, 3, 5})), ef::shape_error);
  CHECK_THROWS_EXACTLY(sin.backward(probe), std::logic_error);
}
