// nn::Linear and nn::Conv1D: init equals nn.Linear's, forward, and backward against finite differences in double.
#include <doctest/doctest.h>

#include <eigenformer/io/state_dict.hpp>
#include <eigenformer/nn/conv1d.hpp>
#include <eigenformer/nn/linear.hpp>

#include "support/cases.hpp"
#include "support/fixtures.hpp"
#include "support/gradcheck.hpp"
#include "support/naive.hpp"
#include "support/nn_fixtures.hpp"
#include "support/thread_counts.hpp"
#include "support/throws.hpp"

using namespace eftest;

TEST_CASE("Linear: manual_seed(789) init reproduces SelfAttention_v2's nn.Linear weights (worked example)") {
  const auto& ex = worked_examples().at("self_attention_v2");
  ef::manual_seed(789);
  ef::nn::Linear<float> q(3, 2, false), k(3, 2, false), v(3, 2, false);
  const auto wq = ex.at("W_query_weight").get<std::vector<double>>();
  const auto got = q.weight.data.to_vector();
  REQUIRE(got.size() == wq.size());
  // The worked example prints 6 decimals.
  for (std::size_t i = 0; i < wq.size(); ++i) CHECK(std::abs(got[i] - wq[i]) <= 5e-7);
  CHECK(q.weight.shape() == ef::Shape<2>{2, 3});
  CHECK_FALSE(q.bias.has_value());
}

TEST_CASE_TEMPLATE("Linear: forward is x W^T + b over the last dim, for any leading dims", T, float, double) {
  ef::manual_seed(0);
  ef::nn::Linear<T> lin(4, 3);
  const auto x = ef::randn<T>({2, 5, 4});
  const auto y = lin.forward(x);
  CHECK(y.shape() == ef::Shape<3>{2, 5, 3});
  // Against plain loops summing in double, not the library's matmul and add: 4-term sums of O(1) values,
  // which float accumulation gets within a few float ulps (1e-6 relative, 1e-6 absolute near 0).
  const auto expected = naive_affine(x, lin.weight.data, true, lin.bias->data);
  check_tensors_close(y.template to<double>(), ef::from_vector(ef::Shape<1>{static_cast<index_t>(expected.size())}, expected),
                      1e-6, 1e-6, "forward");
  auto names = lin.named_parameters();
  REQUIRE(names.size() == 2);
  CHECK(names[0].name == "weight");
  CHECK(names[1].name == "bias");
  CHECK(lin.num_parameters() == 15);
}

// Tolerance: f64_rtol / f64_atol, see support/nn_fixtures.hpp.
TEST_CASE("Linear: forward and gradients match PyTorch run in float64, at double precision (fixture)") {
  const auto& c = nn_case("linear_f64");
  const auto& cfg = c.at("config");
  ef::nn::Linear<double> lin(cfg.at("in_features").get<index_t>(), cfg.at("out_features").get<index_t>(),
                             cfg.at("bias").get<bool>());
  check_f64_case(lin, c);
}

TEST_CASE("Linear: backward matches central finite differences (double)") {
  ef::manual_seed(1);
  ef::nn::Linear<double> lin(5, 3);
  auto x = ef::randn<double>({2, 3, 5});
  const auto probe = ef::randn<double>({2, 3, 3});
  auto f = [&] {
    lin.eval();
    auto y = lin.forward(x);
    lin.train();
    return y;
  };
  lin.train();
  lin.zero_grad();
  lin.forward(x);
  const auto dx = lin.backward(probe);
  check_tensors_close(dx, numerical_gradient(f, x, probe), 1e-6, 1e-9, "dx");
  for (auto& p : lin.named_parameters())
    check_tensors_close(p.grad(), numerical_gradient(f, p.data, probe), 1e-6, 1e-9, p.name);
}

TEST_CASE("Linear: gradients accumulate across backward calls and zero_grad resets them") {
  ef::manual_seed(2);
  ef::nn::Linear<double> lin(3, 2);
  const auto x = ef::randn<double>({4, 3});
  const auto g = ef::randn<double>({4, 2});
  lin.forward(x);
  lin.backward(g);
  const auto once = lin.weight.grad().clone();
  lin.forward(x);
  lin.backward(g);
  check_tensors_close(lin.weight.grad(), once * 2.0, 1e-12, 1e-12, "accumulated");
  lin.zero_grad();
  CHECK(ef::sum(ef::abs(lin.weight.grad())).item() == 0.0);
}

TEST_CASE("Linear: bad input") {
  ef::nn::Linear<float> lin(4, 2);
  CHECK_THROWS_WITH_EXACTLY(lin.forward(ef::zeros<float>({3, 5})),
                       "Linear.forward: input [3, 5] x weight [2, 4]: last dim of the input must be in_features 4",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(lin.backward(ef::zeros<float>({3, 2})), doctest::Contains("nothing saved"), std::logic_error);
  lin.eval();
  lin.forward(ef::zeros<float>({3, 4}));  // eval mode caches nothing
  CHECK_THROWS_EXACTLY(lin.backward(ef::zeros<float>({3, 2})), std::logic_error);
  lin.train();
  lin.forward(ef::zeros<float>({3, 4}));
  CHECK_THROWS_EXACTLY(lin.backward(ef::zeros<float>({3, 3})), ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::nn::Linear<float>(0, 2), std::invalid_argument);
}

// Conv1D is Linear with the weight stored transposed: loading W^T into a Conv1D must give the same output and
// the same gradients (transposed for the weight), and both backwards agree with finite differences.
TEST_CASE("Conv1D: equals Linear with the transposed weight, forward and backward; finite differences (double)") {
  ef::manual_seed(3);
  ef::nn::Linear<double> lin(5, 3);
  ef::nn::Conv1D<double> conv(5, 3);
  conv.weight.data.copy_(lin.weight.data.t());
  conv.bias.data.copy_(lin.bias->data);
  auto x = ef::randn<double>({2, 4, 5});
  const auto probe = ef::randn<double>({2, 4, 3});
  check_tensors_close(conv.forward(x), lin.forward(x), 1e-12, 1e-12, "forward");
  const auto dx_conv = conv.backward(probe);
  check_tensors_close(dx_conv, lin.backward(probe), 1e-12, 1e-12, "dx");
  check_tensors_close(conv.weight.grad(), lin.weight.grad().t(), 1e-12, 1e-12, "dweight");
  check_tensors_close(conv.bias.grad(), lin.bias->grad(), 1e-12, 1e-12, "dbias");

  auto f = [&] {
    conv.eval();
    auto y = conv.forward(x);
    conv.train();
    return y;
  };
  check_tensors_close(dx_conv, numerical_gradient(f, x, probe), 1e-6, 1e-9, "dx (finite differences)");
  std::vector<std::string> names;
  for (auto& p : conv.named_parameters()) {
    names.push_back(p.name);
    check_tensors_close(p.grad(), numerical_gradient(f, p.data, probe), 1e-6, 1e-9, p.name);
  }
  CHECK(names == std::vector<std::string>{"weight", "bias"});
  CHECK(conv.type_name() == "Conv1D");

  CHECK_THROWS_WITH_EXACTLY(conv.forward(ef::zeros<double>({3, 4})),
                       "Conv1D.forward: input [3, 4] x weight [5, 3]: last dim of the input must be in_features 5",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(conv.backward(probe), doctest::Contains("Conv1D.backward: nothing saved"), std::logic_error);
}

TEST_CASE("Linear: a frozen weight gets no gradient, the bias and the input still do") {
  ef::manual_seed(4);
  ef::nn::Linear<float> lin(3, 2);
  lin.weight.requires_grad_(false);
  lin.forward(ef::randn<float>({4, 3}));
  const auto dx = lin.backward(ef::ones<float>({4, 2}));
  CHECK(dx.shape() == ef::Shape<2>{4, 3});
  CHECK_FALSE(lin.weight.has_grad());
  CHECK(lin.bias->has_grad());
  CHECK(lin.bias->grad()(0) == 4.f);
}

// A Linear holding its weight only as bfloat16 (to_bf16_weights(FloatWeights::release)) computes what the same
// layer with its rounded float weight kept computes: 1 row through the same streamed copy (bit for bit), 6 and
// 40 rows widened, also written into a column block of a wider output (dense_product_into, BERT's q | k | v)
// with nothing written either side of it. 40 rows take the packed kernel where this CPU has one: the weight
// widened into its panels gives the float product's bits. Otherwise (6 rows; Eigen) tolerance 1e-6 relative +
// 1e-6 absolute, float sums of 40 O(1) terms in another order. In training mode the forward refuses, as does
// pack_weights.
TEST_CASE("Linear: a weight held only as bfloat16 computes the rounded layer, and training refuses it") {
  ef::manual_seed(5);
  ef::nn::Linear<float> kept(40, 70), held(40, 70);
  held.weight.data.copy_(kept.weight.data);
  held.bias->data.copy_(kept.bias->data);
  kept.to_bf16_weights(ef::FloatWeights::keep);
  held.to_bf16_weights(ef::FloatWeights::release);
  kept.eval();
  held.eval();
  CHECK(held.weight.float_released());
  CHECK(held.num_parameters() == kept.num_parameters());
  REQUIRE(held.bf16_weight() != nullptr);
  const auto one = ef::randn<float>({1, 40});
  CHECK(held.forward(one).to_vector() == kept.forward(one).to_vector());
  std::size_t ran = 0;
  for (const index_t rows : {6, 40}) {
    CAPTURE(rows);
    const auto x2 = ef::randn<float>({rows, 40});
    const auto expected = kept.forward(x2);
    const bool packed_kernel = ef::backend::reads_packed_weight(rows);
    if (packed_kernel) CHECK(held.forward(x2).to_vector() == expected.to_vector());
    else check_tensors_close(held.forward(x2), expected, 1e-6, 1e-6, "forward");
    auto wide = ef::zeros<float>({rows, 100});
    auto block = wide.narrow(1, 20, 70);
    ef::nn::detail::dense_product_into(x2, held.weight.data.t(), held.prepared_weight(), block,
                                       ef::backend::Epilogue<float>{&held.bias->data, ef::backend::Activation::none});
    if (packed_kernel) CHECK(block.contiguous().to_vector() == expected.to_vector());
    else check_tensors_close(block, expected, 1e-6, 1e-6, "into a column block");
    std::size_t outside = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < 100; ++j) outside += (j < 20 || j >= 90) && wide(i, j) != 0.0f;
    CHECK(outside == 0);
    ++ran;
  }
  check_ran(ran, 2, "row counts");
  const auto six = ef::randn<float>({2, 3, 40});
  held.train();
  CHECK_THROWS_WITH_AS(held.forward(six), doctest::Contains("held only as bfloat16"), std::logic_error);
  CHECK_THROWS_WITH_AS(held.pack_weights(), doctest::Contains("held only as bfloat16"), std::logic_error);
}

// A Linear or Conv1D holding its weight only packed (pack_weights(FloatWeights::release)) reads the packed copy
// for every product. 8 and 40 rows: the bits of the same layer keeping its float weight beside the copy (the
// same kernel reads the same panels). 1, 3 and 6 rows: the packed kernel too, so each row has the bits it has
// in a product of 12 rows (the rows padded with zero rows, through the kept layer), and lies within 1e-6
// relative + 1e-6 absolute of the float weight's own few-row kernels (float sums of 40 O(1) terms in another
// order); also written into a column block with nothing written either side. 1 and 2 threads. Training, bfloat16
// conversion and state_dict refuse it, naming the packed copy; unpack_weights gives the float weight back, bit
// for bit. Where there is no packed kernel nothing is packed and nothing released.
TEST_CASE("Linear and Conv1D: a weight held only packed gives the packed products' bits, and unpacks back") {
  std::size_t ran = 0;
  for (const bool conv : {false, true}) {
    CAPTURE(conv);
    ef::manual_seed(15);
    auto make = [conv]() -> std::unique_ptr<ef::nn::Module<float>> {
      if (conv) return std::make_unique<ef::nn::Conv1D<float>>(40, 70);
      return std::make_unique<ef::nn::Linear<float>>(40, 70);
    };
    auto kept_module = make(), held_module = make();
    auto forward = [conv](ef::nn::Module<float>& m, const ef::Tensor<float, 2>& x) {
      return conv ? static_cast<ef::nn::Conv1D<float>&>(m).forward(x) : static_cast<ef::nn::Linear<float>&>(m).forward(x);
    };
    auto pack = [conv](ef::nn::Module<float>& m, ef::FloatWeights floats) {
      if (conv) static_cast<ef::nn::Conv1D<float>&>(m).pack_weights(floats);
      else static_cast<ef::nn::Linear<float>&>(m).pack_weights(floats);
    };
    auto weight = [conv](ef::nn::Module<float>& m) -> ef::nn::Parameter<float, 2>& {
      if (conv) return static_cast<ef::nn::Conv1D<float>&>(m).weight;
      return static_cast<ef::nn::Linear<float>&>(m).weight;
    };
    auto prepared = [conv](ef::nn::Module<float>& m) {
      return conv ? static_cast<ef::nn::Conv1D<float>&>(m).prepared_weight()
                  : static_cast<ef::nn::Linear<float>&>(m).prepared_weight();
    };
    ef::io::load_state_dict(*held_module, ef::io::state_dict(*kept_module));
    const auto original = weight(*kept_module).data.contiguous().to_vector();
    kept_module->eval();
    held_module->eval();
    pack(*kept_module, ef::FloatWeights::keep);
    pack(*held_module, ef::FloatWeights::release);
    if (!ef::backend::reads_packed_weight(16)) {  // no packed kernel: nothing packed, nothing freed
      CHECK_FALSE(weight(*held_module).float_released());
      ++ran;
      continue;
    }
    REQUIRE(weight(*held_module).float_released());
    CHECK(std::string(weight(*held_module).held_as()).find("packed") != std::string::npos);
    pack(*held_module, ef::FloatWeights::release);  // again: nothing to do
    const eftest::RestoreThreadCount restore_threads;
    for (const int threads : {1, 2}) {
      ef::set_num_threads(threads);
      for (const index_t rows : {1, 3, 6, 8, 40}) {
        CAPTURE(rows);
        CAPTURE(threads);
        const auto x = ef::randn<float>({rows, 40});
        const auto got = forward(*held_module, x);
        if (rows >= 8) {
          CHECK(got.to_vector() == forward(*kept_module, x).to_vector());
        } else {
          auto padded = ef::zeros<float>({12, 40});
          padded.narrow(0, 0, rows).copy_(x);
          const auto as_in_many = forward(*kept_module, padded).narrow(0, 0, rows).contiguous();
          CHECK(got.to_vector() == as_in_many.to_vector());
          check_tensors_close(got, forward(*kept_module, x), 1e-6, 1e-6, "few rows against the float kernels");
        }
        auto wide = ef::zeros<float>({rows, 100});
        auto block = wide.narrow(1, 20, 70);
        const auto w = conv ? weight(*held_module).data : weight(*held_module).data.t();
        auto* bias = conv ? &static_cast<ef::nn::Conv1D<float>&>(*held_module).bias.data
                          : &static_cast<ef::nn::Linear<float>&>(*held_module).bias->data;
        ef::nn::detail::dense_product_into(x, w, prepared(*held_module), block,
                                           ef::backend::Epilogue<float>{bias, ef::backend::Activation::none});
        CHECK(block.contiguous().to_vector() == got.to_vector());
        std::size_t outside = 0;
        for (index_t i = 0; i < rows; ++i)
          for (index_t j = 0; j < 100; ++j) outside += (j < 20 || j >= 90) && wide(i, j) != 0.0f;
        CHECK(outside == 0);
        ++ran;
      }
    }
    const auto x = ef::randn<float>({2, 40});
    held_module->train();
    CHECK_THROWS_WITH_AS(forward(*held_module, x), doctest::Contains("held only as packed"), std::logic_error);
    held_module->eval();
    CHECK_THROWS_WITH_AS(ef::io::state_dict(*held_module), doctest::Contains("held only as packed"),
                         ef::io::checkpoint_error);
    if (conv) {
      auto& c = static_cast<ef::nn::Conv1D<float>&>(*held_module);
      CHECK_THROWS_WITH_AS(c.to_bf16_weights(), doctest::Contains("held only packed"), std::logic_error);
      c.unpack_weights();
    } else {
      auto& l = static_cast<ef::nn::Linear<float>&>(*held_module);
      CHECK_THROWS_WITH_AS(l.to_bf16_weights(), doctest::Contains("held only packed"), std::logic_error);
      l.unpack_weights();
    }
    CHECK_FALSE(weight(*held_module).float_released());
    CHECK(weight(*held_module).data.contiguous().to_vector() == original);
    CHECK(forward(*held_module, x).to_vector() == forward(*kept_module, x).to_vector());
  }
  check_ran_at_least(ran, 2, "layers and row counts");
}

// dense_hidden_product lays a float result 1024 floats wide (rows a multiple of 4 KiB apart otherwise) out with
// its rows 1040 floats apart, as a view of a wider tensor, and any other result as dense_product does; either
// way the values are dense_product's bit for bit (the same kernel reads the same weight and writes at another
// stride): for a float weight, a packed copy kept beside it and a weight held only as bfloat16. 3 rows (the
// decoding products) and 1000 columns stay contiguous. A Linear then reads the spaced rows as its 2-D input
// and gives the bits it gives their contiguous copy, in inference and in training, backward included.
TEST_CASE("dense_hidden_product spaces rows 4 KiB apart with dense_product's bits, and Linear reads such rows") {
  std::size_t ran = 0;
  for (const index_t width : {1024, 1000})
    for (const int hold : {0, 1, 2})  // the float weight, packed beside it, held only as bfloat16
      for (const index_t rows : {3, 40}) {
        CAPTURE(width);
        CAPTURE(hold);
        CAPTURE(rows);
        ef::manual_seed(21);
        ef::nn::Linear<float> layer(32, width);
        layer.eval();
        if (hold == 1) layer.pack_weights(ef::FloatWeights::keep);
        if (hold == 2) layer.to_bf16_weights(ef::FloatWeights::release);
        const auto x = ef::randn<float>({rows, 32});
        const ef::backend::Epilogue<float> epilogue{&layer.bias->data, ef::backend::Activation::gelu_tanh};
        const auto w = layer.weight.data.t();
        const auto expected = ef::nn::detail::dense_product(x, w, layer.prepared_weight(), epilogue);
        const auto got = ef::nn::detail::dense_hidden_product(x, w, layer.prepared_weight(), epilogue);
        const bool spaced = width == 1024 && rows > ef::backend::detail::gemv_max_rows;
        CHECK(got.strides()[0] == (spaced ? 1040 : width));
        CHECK(got.contiguous().to_vector() == expected.to_vector());
        if (spaced) {
          ef::nn::Linear<float> next(width, 24);
          next.eval();
          CHECK(next.forward(got).to_vector() == next.forward(got.contiguous()).to_vector());
          next.train();
          const auto g = ef::randn<float>({rows, 24});
          const auto y_spaced = next.forward(got);
          const auto dx_spaced = next.backward(g);
          const auto dw_spaced = next.weight.grad().contiguous().to_vector();
          next.zero_grad();
          const auto y_dense = next.forward(got.contiguous());
          const auto dx_dense = next.backward(g);
          CHECK(y_spaced.to_vector() == y_dense.to_vector());
          CHECK(dx_spaced.to_vector() == dx_dense.to_vector());
          CHECK(dw_spaced == next.weight.grad().contiguous().to_vector());
        }
        ++ran;
      }
  check_ran(ran, 2 * 3 * 2, "widths, weight forms and row counts");
}
