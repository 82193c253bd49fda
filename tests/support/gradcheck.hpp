// Central finite differences in double precision, to check every backward pass.
//
// The scalar checked is L = sum(forward(x) * probe), with `probe` a fixed random tensor of the output's
// shape, so that every output element contributes with a different weight and dL/dout = probe. With
// eps = 1e-6 the central difference has truncation error O(eps^2) ~ 1e-12 times the third derivative and
// rounding error ~ 1e-16 / eps ~ 1e-10 relative to |L|: tests compare at 1e-6 relative (plus a small
// absolute floor for gradients near zero).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <eigenformer/tensor.hpp>
#include <string>

namespace eftest {

namespace ef = eigenformer;

template <std::size_t R>
double weighted_sum(const ef::Tensor<double, R>& out, const ef::Tensor<double, R>& probe) {
  REQUIRE(out.shape() == probe.shape());
  return ef::sum(ef::mul(out, probe)).item();
}

// d/dv sum(f() * probe) for every element of `v`, by perturbing v in place (v shares storage with whatever
// f reads: a layer parameter's flat view or the input itself). f must not depend on training-mode caches.
template <class F, std::size_t R, std::size_t Rv>
ef::Tensor<double, Rv> numerical_gradient(F&& f, ef::Tensor<double, Rv> v, const ef::Tensor<double, R>& probe,
                                          double eps = 1e-6) {
  auto g = ef::zeros<double>(v.shape());
  auto flat = v.contiguous();
  REQUIRE(flat.data() == v.data());  // must perturb the real storage
  auto gflat = g.view(ef::Shape<1>{g.numel()});
  for (ef::index_t i = 0; i < v.numel(); ++i) {
    double& x = flat.data()[i];
    const double saved = x;
    x = saved + eps;
    const double up = weighted_sum(f(), probe);
    x = saved - eps;
    const double down = weighted_sum(f(), probe);
    x = saved;
    gflat(i) = (up - down) / (2 * eps);
  }
  return g;
}

// |a - e| <= atol + rtol * |e| element-wise, reporting the first few failures.
template <typename T, std::size_t R, std::size_t R2>
void check_tensors_close(const ef::Tensor<T, R>& actual, const ef::Tensor<T, R2>& expected, double rtol, double atol,
                         const std::string& what) {
  INFO(what);
  REQUIRE(actual.numel() == expected.numel());
  const auto a = actual.to_vector();
  const auto e = expected.to_vector();
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = e[i];
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y)) && bad++ < 5)
      FAIL_CHECK("element " << i << ": " << x << " vs expected " << y);
  }
  CHECK(bad == 0);
}

}  // namespace eftest
