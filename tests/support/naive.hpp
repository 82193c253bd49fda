// Reference computations written as plain loops over the values, for tests whose expected output would
// otherwise come from the library's own matmul and broadcasting (which would then be checked against
// themselves).
#pragma once

#include <eigenformer/tensor.hpp>

#include <vector>

namespace eftest {

// x (..., in) times a weight, plus a bias (out): y[r, o] = sum_i x[r, i] * weight(o, i) + bias[o], summed in
// double. `weight_is_out_in` says how the weight is stored: (out, in) as nn::Linear, or (in, out) as
// Conv1D. Returns the rows flat, (rows, out).
template <typename T, std::size_t R>
std::vector<double> naive_affine(const eigenformer::Tensor<T, R>& x, const eigenformer::Tensor<T, 2>& weight,
                                 bool weight_is_out_in, const eigenformer::Tensor<T, 1>& bias) {
  const auto xv = x.to_vector(), wv = weight.to_vector(), bv = bias.to_vector();
  const std::size_t in = static_cast<std::size_t>(x.shape()[R - 1]), out = bv.size();
  const std::size_t rows = xv.size() / in;
  std::vector<double> y(rows * out);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double s = static_cast<double>(bv[o]);
      for (std::size_t i = 0; i < in; ++i)
        s += static_cast<double>(xv[r * in + i]) * static_cast<double>(weight_is_out_in ? wv[o * in + i] : wv[i * out + o]);
      y[r * out + o] = s;
    }
  return y;
}

}  // namespace eftest
