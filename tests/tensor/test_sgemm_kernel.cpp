// Tests of the packed single-precision kernel (include/eigenformer/tensor/sgemm_kernel.hpp), once for each
// instruction set it is compiled for that this CPU runs (AVX-512, AVX2; cpu_isa.hpp): the kernels' own
// entry points against a double-precision product, bit for bit against each other and across blocks; then
// backend::gemm, packed weights and layers with the choice capped to each (backend::set_max_cpu_isa). On a
// CPU with neither, each test says it left its cases out. ctest also runs the whole unit suite with
// EIGENFORMER_MAX_CPU_ISA=avx2 and =baseline (tests/CMakeLists.txt), so every layer runs on every path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "eigenformer/nn/conv1d.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/tensor.hpp"
#include "eigenformer/tensor/packed_matrix.hpp"
#include "support/cases.hpp"
#include "support/thread_counts.hpp"

namespace ef = eigenformer;
using ef::index_t;
using ef::backend::CpuIsa;
using ef::backend::detail::SgemmKernel;

namespace {

// The kernels this CPU runs, widest first; empty where there are none (and a line saying so).
std::vector<const SgemmKernel*> kernels_on_this_cpu() {
  std::vector<const SgemmKernel*> kernels;
  const CpuIsa detected = ef::backend::detected_cpu_isa();
  for (CpuIsa isa : {CpuIsa::avx512, CpuIsa::avx2})
    if (static_cast<int>(isa) <= static_cast<int>(detected))
      if (const auto* kernel = ef::backend::detail::sgemm_kernel_for(isa)) kernels.push_back(kernel);
  if (kernels.empty())
    MESSAGE("left out: this CPU (or this build) has no packed kernel; Eigen computes products");
  return kernels;
}

// Caps the instruction set for the products of one scope (set_max_cpu_isa), then restores the one before.
struct CpuIsaCap {
  CpuIsa saved = ef::backend::cpu_isa();
  explicit CpuIsaCap(CpuIsa cap) { REQUIRE(ef::backend::set_max_cpu_isa(cap) == cap); }
  ~CpuIsaCap() { ef::backend::set_max_cpu_isa(saved); }
};

// A stored operand: rows x cols, row- or column-major, with a leading stride larger than needed so that
// the kernel cannot rely on packed storage.
struct Operand {
  index_t rows = 0, cols = 0, ld = 0;
  bool col_major = false;
  std::vector<float> data;
  float at(index_t i, index_t j) const { return col_major ? data[i + j * ld] : data[i * ld + j]; }
};

Operand random_operand(index_t rows, index_t cols, bool col_major, std::mt19937& gen) {
  Operand o;
  o.rows = rows, o.cols = cols, o.col_major = col_major;
  o.ld = (col_major ? rows : cols) + 3;
  o.data.assign(static_cast<std::size_t>(o.ld * (col_major ? cols : rows) + 3), 0.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (auto& x : o.data) x = uniform(gen);
  return o;
}

struct Shape3 {
  index_t m, n, k;
};

// Shapes on both sides of every blocking edge: the register block (mr x nr of either kernel), the k block
// (sgemm_kc), the row block (sgemm_mc) and the column block (sgemm_nc), plus sizes that are none of these.
std::vector<Shape3> edge_shapes(const SgemmKernel& kernel) {
  using namespace ef::backend::detail;
  const index_t mr = kernel.mr, nr = kernel.nr, kc = sgemm_kc;
  return {{1, 1, 1},
          {mr, nr, 1},
          {mr - 1, nr - 1, 7},
          {mr + 1, nr + 1, 9},
          {2 * mr + 3, 3 * nr + 5, kc - 1},
          {5, 70, kc},
          {37, 19, kc + 1},
          {sgemm_mc + 5, 41, 2 * kc + 3},
          {29, sgemm_nc + 9, 33},
          {128, 96, 64},
          {3, 2, 600}};
}

}  // namespace

// 263 rows (a 144-row block and a 119-row one ending in a short panel) by 16 column panels and a 3-long last
// k block: AVX-512 walks both of its row blocks' full k blocks row panel first.
constexpr Shape3 rows_first_shape{263, 16 * 32 - 7, ef::backend::detail::sgemm_kc + 3};
#if defined(EIGENFORMER_X86_KERNELS)
static_assert(
    ef::backend::detail::avx512::sgemm_walks_rows_first(rows_first_shape.m, ef::backend::detail::sgemm_mc,
                                                        rows_first_shape.n, ef::backend::detail::sgemm_kc) &&
        ef::backend::detail::avx512::sgemm_walks_rows_first(
            rows_first_shape.m, rows_first_shape.m - ef::backend::detail::sgemm_mc, rows_first_shape.n,
            ef::backend::detail::sgemm_kc) &&
        !ef::backend::detail::avx512::sgemm_walks_rows_first(rows_first_shape.m - rows_first_shape.m / 3 - 1,
                                                             ef::backend::detail::sgemm_mc,
                                                             rows_first_shape.n / 2 + 1,
                                                             ef::backend::detail::sgemm_kc),
    "rows_first_shape no longer takes the row-first walk whole and the column-first one in parts");
#endif

TEST_CASE("packed sgemm equals a double-precision product for every layout, edge, alpha and beta") {
  std::mt19937 gen(5);
  struct Scale {
    float alpha, beta;
  };
  const std::vector<Scale> scales{{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}, {2.0f, 0.0f}};
  std::size_t ran = 0, expected = 0;
  for (const SgemmKernel* kernel : kernels_on_this_cpu()) {
    const std::string isa = kernel->name();
    CAPTURE(isa);
    expected += edge_shapes(*kernel).size() * 4 * scales.size();
    for (const auto& s : edge_shapes(*kernel))
      for (int layout = 0; layout < 4; ++layout)
        for (const auto& sc : scales) {
          const bool ta = layout & 1, tb = layout & 2;
          const Operand a = random_operand(s.m, s.k, ta, gen), b = random_operand(s.k, s.n, tb, gen);
          const index_t ldc = s.n + 2;
          std::vector<float> c(static_cast<std::size_t>(s.m * ldc)), c0;
          std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
          for (auto& x : c) x = sc.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : uniform(gen);
          c0 = c;
          kernel->packed(ta, tb, s.m, s.n, s.k, sc.alpha, a.data.data(), a.ld, b.data.data(), b.ld, sc.beta,
                         c.data(), ldc);
          // Each term of a float sum of k products can round by one unit (2^-24) of the running sum, so the
          // error of c is at most about k * 2^-24 * sum |alpha a b| plus the rounding of beta c; 2k leaves
          // room for the final scaling and add without admitting a wrong element (an error of order 1).
          double worst = 0;
          for (index_t i = 0; i < s.m; ++i)
            for (index_t j = 0; j < ldc; ++j) {
              const float got = c[static_cast<std::size_t>(i * ldc + j)];
              const float old = c0[static_cast<std::size_t>(i * ldc + j)];
              if (j >= s.n) {  // padding of c between rows: never written
                REQUIRE(std::memcmp(&got, &old, sizeof(float)) == 0);
                continue;
              }
              double ref = 0, magnitude = 0;
              for (index_t p = 0; p < s.k; ++p) {
                const double term = double(sc.alpha) * double(a.at(i, p)) * double(b.at(p, j));
                ref += term;
                magnitude += std::abs(term);
              }
              if (sc.beta != 0.0f)
                ref += double(sc.beta) * double(old), magnitude += std::abs(double(sc.beta) * old);
              const double bound = 2.0 * double(s.k + 2) * std::ldexp(1.0, -24) * magnitude;
              worst = std::max(worst, std::abs(double(got) - ref) / std::max(bound, 1e-30));
              REQUIRE_MESSAGE(std::abs(double(got) - ref) <= bound,
                              "m n k " << s.m << " " << s.n << " " << s.k << ", layout " << layout
                                       << ", alpha " << sc.alpha << ", beta " << sc.beta << ", element (" << i
                                       << ", " << j << "): " << got << " against " << ref);
            }
          CHECK(worst <= 1.0);
          ++ran;
        }
  }
  if (expected > 0) eftest::check_ran(ran, expected, "packed sgemm cases");
}

TEST_CASE("packed sgemm: the AVX-512 and AVX2 kernels give the same bits") {
  // Their register blocks differ (12 x 32 and 6 x 16) but each element is the same sequence of fused
  // multiply-adds (sgemm_kernel.hpp, "Bits"), so a machine's choice of kernel never changes a result.
  const auto kernels = kernels_on_this_cpu();
  if (kernels.size() < 2) {
    MESSAGE("left out: this CPU runs " << kernels.size() << " of the two kernels");
    return;
  }
  std::mt19937 gen(7);
  std::size_t ran = 0;
  auto shapes = edge_shapes(*kernels[0]);
  shapes.push_back(rows_first_shape);  // AVX2 walks it column panel first
  for (const auto& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (const float beta : {0.0f, 0.75f}) {
        const bool ta = layout & 1, tb = layout & 2;
        const Operand a = random_operand(s.m, s.k, ta, gen), b = random_operand(s.k, s.n, tb, gen);
        std::vector<float> c512(static_cast<std::size_t>(s.m * s.n));
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (auto& x : c512) x = uniform(gen);
        auto c2 = c512;
        kernels[0]->packed(ta, tb, s.m, s.n, s.k, -1.25f, a.data.data(), a.ld, b.data.data(), b.ld, beta,
                           c512.data(), s.n);
        kernels[1]->packed(ta, tb, s.m, s.n, s.k, -1.25f, a.data.data(), a.ld, b.data.data(), b.ld, beta,
                           c2.data(), s.n);
        REQUIRE_MESSAGE(
            std::memcmp(c512.data(), c2.data(), sizeof(float) * c2.size()) == 0,
            "m n k " << s.m << " " << s.n << " " << s.k << ", layout " << layout << ", beta " << beta);
        ++ran;
      }
  eftest::check_ran(ran, shapes.size() * 4 * 2, "AVX-512 against AVX2 cases");
}

TEST_CASE(
    "packed sgemm: a column-major a that the kernel copies into panels gives the bits of one read in place") {
  // The kernel copies a column-major a into panels when its columns lie 4 KiB apart or more, or a multiple of
  // 1 KiB from 2 KiB on in a block of 256 columns or more (sgemm_copies_a); the arithmetic must not change.
  // Columns exactly 4 KiB apart and 1500 floats apart, and 768 floats (3 KiB) apart for a wide product, against
  // closer ones (read in place), rows across the row block's edge with a short last panel, k across the k
  // block's, a block walked row panel first (rows_first_shape), alpha -1.5, and beta 0 (c only written) and 0.5
  // (c read back).
  std::mt19937 gen(21);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::size_t ran = 0, expected = 0;
  for (const SgemmKernel* kernel : kernels_on_this_cpu()) {
    const std::string isa = kernel->name();
    CAPTURE(isa);
    const bool avx512 = kernel->isa == ef::backend::CpuIsa::avx512;
    const auto copies_a =
        avx512 ? &ef::backend::detail::avx512::sgemm_copies_a : &ef::backend::detail::avx2::sgemm_copies_a;
    const Shape3 wide{ef::backend::detail::sgemm_mc + 5, 520, ef::backend::detail::sgemm_kc + 44};
    struct Case {
      Shape3 shape;
      index_t aliased_ld;
    };
    std::vector<Case> cases;
    for (const Shape3 s : {Shape3{ef::backend::detail::sgemm_mc + 5, 40, ef::backend::detail::sgemm_kc + 44},
                           Shape3{7, 17, 5}, rows_first_shape})
      for (const index_t ld : {index_t{1024}, index_t{1500}}) cases.push_back({s, ld});
    cases.push_back({wide, 768});
    expected += 2 * cases.size();
    for (const Case& one : cases)
      for (const float beta : {0.0f, 0.5f}) {
        // Named copies, not structured bindings: clang 14 cannot capture those in doctest's message lambda.
        const Shape3 s = one.shape;
        const index_t aliased_ld = one.aliased_ld;
        const index_t plain_ld = s.m + 3;
        REQUIRE(copies_a(aliased_ld, s.n));
        REQUIRE(!copies_a(plain_ld, s.n));  // the other side reads in place
        REQUIRE(s.m <= aliased_ld);
        std::vector<float> aliased(static_cast<std::size_t>(aliased_ld * s.k));
        std::vector<float> plain(static_cast<std::size_t>(plain_ld * s.k));
        for (index_t p = 0; p < s.k; ++p)
          for (index_t i = 0; i < s.m; ++i)
            aliased[p * aliased_ld + i] = plain[p * plain_ld + i] = uniform(gen);
        const Operand b = random_operand(s.k, s.n, true, gen);
        std::vector<float> c_aliased(static_cast<std::size_t>(s.m * s.n));
        for (auto& x : c_aliased) x = uniform(gen);
        auto c_plain = c_aliased;
        kernel->packed(true, true, s.m, s.n, s.k, -1.5f, aliased.data(), aliased_ld, b.data.data(), b.ld,
                       beta, c_aliased.data(), s.n);
        kernel->packed(true, true, s.m, s.n, s.k, -1.5f, plain.data(), plain_ld, b.data.data(), b.ld, beta,
                       c_plain.data(), s.n);
        REQUIRE_MESSAGE(
            std::memcmp(c_aliased.data(), c_plain.data(), sizeof(float) * c_plain.size()) == 0,
            "m n k " << s.m << " " << s.n << " " << s.k << ", beta " << beta << ", lda " << aliased_ld);
        ++ran;
      }
  }
  if (expected > 0) eftest::check_ran(ran, expected, "copied-a cases");
}

TEST_CASE("packed sgemm: an element's bits depend on K alone, not on the block it is computed in") {
  // backend::gemm hands the kernel tiles that start anywhere and cuts them by thread count; this computes
  // sub-blocks at offsets that are not multiples of the register block and compares them bit for bit.
  std::mt19937 gen(9);
  std::size_t ran = 0, minimum = 0;
  for (const SgemmKernel* kernel : kernels_on_this_cpu()) {
    const std::string isa = kernel->name();
    CAPTURE(isa);
    minimum += 4 * 9;
    auto shapes = edge_shapes(*kernel);
    // A training-sized block: the whole product walks its blocks row panel first (AVX-512), its parts (at
    // most 175 rows) column panel first, so the comparison below holds one walk against the other.
    shapes.push_back(rows_first_shape);
    for (const auto& s : shapes) {
      if (s.m < 3 || s.n < 3) continue;
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        const Operand a = random_operand(s.m, s.k, ta, gen), b = random_operand(s.k, s.n, tb, gen);
        std::vector<float> whole(static_cast<std::size_t>(s.m * s.n)), parts(whole.size());
        kernel->packed(ta, tb, s.m, s.n, s.k, 1.0f, a.data.data(), a.ld, b.data.data(), b.ld, 0.0f,
                       whole.data(), s.n);
        const index_t r_cut = s.m / 3 + 1, c_cut = s.n / 2 + 1;
        const index_t rows[3] = {0, r_cut, s.m}, cols[3] = {0, c_cut, s.n};
        for (int ri = 0; ri < 2; ++ri)
          for (int ci = 0; ci < 2; ++ci) {
            const index_t r0 = rows[ri], r1 = rows[ri + 1], c0 = cols[ci], c1 = cols[ci + 1];
            if (r1 <= r0 || c1 <= c0) continue;
            const float* ap = ta ? a.data.data() + r0 : a.data.data() + r0 * a.ld;
            const float* bp = tb ? b.data.data() + c0 * b.ld : b.data.data() + c0;
            kernel->packed(ta, tb, r1 - r0, c1 - c0, s.k, 1.0f, ap, a.ld, bp, b.ld, 0.0f,
                           parts.data() + r0 * s.n + c0, s.n);
          }
        REQUIRE_MESSAGE(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)) == 0,
                        "m n k " << s.m << " " << s.n << " " << s.k << ", layout " << layout);
        ++ran;
      }
    }
  }
  if (minimum > 0) eftest::check_ran_at_least(ran, minimum, "block-independence cases");
}

TEST_CASE("packed sgemm: few rows times a transposed b, computed as b^T a^T, have the bits of b packed beforehand") {
  // The kernels swap the operands' roles for such products (sgemm_transposes_weight; AVX2 from k = 512) and
  // write c from a transposed tile; the weight packed beforehand (both_packed_block) never does. Rows on both
  // sides of the 16-column transposes and 32-column panels of a^T, columns on both sides of the 12-row tiles,
  // k across the k block's edge and up to the 2^18-float limit; c's padding between rows must stay untouched.
  namespace bd = ef::backend::detail;
  std::mt19937 gen(29);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const std::vector<Shape3> swapped{{8, 30, 1},      {13, 40, 255},    {45, 100, 257},  {33, 100, 17},
                                    {128, 140, 768}, {200, 213, 600}, {256, 257, 1024}};
  // Just past the rule's edges: more than 128 rows at k < 512, a^T over 2^18 floats, a column-major a, fewer
  // columns than rows, fewer than three times the rows below k = 256.
  CHECK_FALSE(bd::sgemm_transposes_weight(CpuIsa::avx512, false, true, 129, 400, 256));
  CHECK_FALSE(bd::sgemm_transposes_weight(CpuIsa::avx512, false, true, 128, 400, 2049));
  CHECK_FALSE(bd::sgemm_transposes_weight(CpuIsa::avx512, true, true, 128, 400, 768));
  CHECK_FALSE(bd::sgemm_transposes_weight(CpuIsa::avx512, false, true, 128, 127, 768));
  CHECK_FALSE(bd::sgemm_transposes_weight(CpuIsa::avx512, false, true, 64, 191, 255));
  // The AVX2 kernel swaps from k = 512 on.
  CHECK_FALSE(bd::sgemm_transposes_weight(CpuIsa::avx2, false, true, 128, 400, 511));
  CHECK(bd::sgemm_transposes_weight(CpuIsa::avx2, false, true, 128, 400, 512));
  std::size_t ran = 0, expected = 0;
  for (const SgemmKernel* kernel : kernels_on_this_cpu()) {
    const std::string isa = kernel->name();
    CAPTURE(isa);
    expected += swapped.size() * 2;
    for (const auto& s : swapped)
      for (const float beta : {0.0f, 0.5f}) {
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        CAPTURE(beta);
        CHECK(bd::sgemm_transposes_weight(kernel->isa, false, true, s.m, s.n, s.k) ==
              (kernel->isa == CpuIsa::avx512 || s.k >= 512));
        const Operand a = random_operand(s.m, s.k, false, gen), b = random_operand(s.k, s.n, true, gen);
        const index_t ldc = s.n + 5, padded_cols = kernel->padded_cols(s.n);
        std::vector<float> packed(static_cast<std::size_t>(padded_cols * s.k));
        for (index_t pc = 0; pc < s.k; pc += bd::sgemm_kc) {
          const index_t kc = std::min<index_t>(bd::sgemm_kc, s.k - pc);
          kernel->pack_b(b.data.data() + pc, true, b.ld, kc, s.n,
                         packed.data() + bd::packed_panel_offset(pc, 0, kc, padded_cols));
        }
        std::vector<float> c(static_cast<std::size_t>(s.m * ldc));
        for (auto& x : c) x = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : uniform(gen);
        const auto c0 = c;
        auto c_packed = c;
        kernel->packed(false, true, s.m, s.n, s.k, -1.25f, a.data.data(), a.ld, b.data.data(), b.ld, beta, c.data(),
                       ldc);
        kernel->both_packed_block(s.k, -1.25f, false, a.data.data(), a.ld, packed.data(), padded_cols, 0, s.m, 0, s.n,
                                  beta, c_packed.data(), ldc, nullptr, nullptr);
        REQUIRE(std::memcmp(c.data(), c_packed.data(), sizeof(float) * c.size()) == 0);
        bool padding_kept = true;
        for (index_t i = 0; i < s.m; ++i)
          for (index_t j = s.n; j < ldc; ++j)
            padding_kept = padding_kept && std::memcmp(&c[i * ldc + j], &c0[i * ldc + j], sizeof(float)) == 0;
        CHECK(padding_kept);
        ++ran;
      }
  }
  if (expected > 0) eftest::check_ran(ran, expected, "transposed-weight cases");
}

namespace {

// Runs check(kernel) for each kernel this CPU runs, with products capped to that kernel's instruction set.
template <class Check>
void for_each_kernel(Check&& check) {
  for (const SgemmKernel* kernel : kernels_on_this_cpu()) {
    const std::string isa = kernel->name();
    CAPTURE(isa);
    const CpuIsaCap cap(kernel->isa);
    REQUIRE(ef::backend::detail::sgemm_kernel() == kernel);
    check(*kernel);
  }
}

void check_gemm_on_threads(const SgemmKernel& kernel) {
  std::mt19937 gen(11);
  struct Product {
    index_t m, n, k;
    bool transpose_b;
    bool transpose_a = false;
  };
  // A training step's shapes (x W^T, g W, g^T x) at sizes that cut into several tiles, the last one with
  // more than one k block; then more rows than the packed kernel's block of a (sgemm_mc), a transposed a, and
  // a few rows with a b wider than its block of columns (sgemm_nc).
  const std::vector<Product> products{{96, 200, 130, true},
                                      {200, 130, 96, false},
                                      {130, 96, 200, false, true},
                                      {150, 260, 300, true},
                                      {2 * ef::backend::detail::sgemm_mc + 61, 100, 70, true, true},
                                      {16, 2 * ef::backend::detail::sgemm_nc + 100, 600, true},
                                      {20, ef::backend::detail::sgemm_nc + 76, 600, false, true}};
  const eftest::RestoreThreadCount restore_threads;
  std::size_t ran = 0;
  for (const auto& pr : products) {
    auto a_stored =
        ef::Tensor<float, 2>::empty(pr.transpose_a ? ef::Shape<2>{pr.k, pr.m} : ef::Shape<2>{pr.m, pr.k});
    auto b_stored =
        ef::Tensor<float, 2>::empty(pr.transpose_b ? ef::Shape<2>{pr.n, pr.k} : ef::Shape<2>{pr.k, pr.n});
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (index_t i = 0; i < a_stored.numel(); ++i) a_stored.data()[i] = uniform(gen);
    for (index_t i = 0; i < b_stored.numel(); ++i) b_stored.data()[i] = uniform(gen);
    const auto a = pr.transpose_a ? a_stored.t() : a_stored;
    const auto b = pr.transpose_b ? b_stored.t() : b_stored;
    std::vector<float> direct(static_cast<std::size_t>(pr.m * pr.n));
    kernel.packed(pr.transpose_a, pr.transpose_b, pr.m, pr.n, pr.k, 1.0f, a_stored.data(),
                  pr.transpose_a ? pr.m : pr.k, b_stored.data(), pr.transpose_b ? pr.k : pr.n, 0.0f,
                  direct.data(), pr.n);
    for (int threads : {1, 2, 3}) {
      ef::set_num_threads(threads);
      REQUIRE(ef::backend::detail::packed_product_kernel<float>(pr.m) == &kernel);
      const auto c = ef::backend::gemm(a, b);
      REQUIRE_MESSAGE(std::memcmp(c.data(), direct.data(), direct.size() * sizeof(float)) == 0,
                      pr.m << " x " << pr.k << " x " << pr.n << " on " << threads << " threads");
      // With a bias and GELU applied to each tile: the same as applying them to the direct product.
      auto bias = ef::Tensor<float, 1>::empty({pr.n});
      for (index_t j = 0; j < pr.n; ++j) bias.data()[j] = 0.01f * static_cast<float>(j % 17) - 0.05f;
      const auto fused =
          ef::backend::gemm(a, b, ef::backend::Epilogue<float>{&bias, ef::backend::Activation::gelu_tanh});
      std::vector<float> expected = direct;
      ef::backend::detail::apply_epilogue(expected.data(), pr.n, pr.m, pr.n, bias.data(),
                                          ef::backend::Activation::gelu_tanh);
      REQUIRE_MESSAGE(std::memcmp(fused.data(), expected.data(), expected.size() * sizeof(float)) == 0,
                      "with bias and GELU: " << pr.m << " x " << pr.k << " x " << pr.n << " on " << threads
                                             << " threads");
      ++ran;
    }
  }
  eftest::check_ran(ran, products.size() * 3, "thread-count cases");
}

}  // namespace

TEST_CASE("backend::gemm computes float products with the kernel, with the same bits on 1, 2 and 3 threads") {
  for_each_kernel(check_gemm_on_threads);
}

namespace {

// rows x cols of uniform(-1, 1) values, as a fresh row-major tensor.
ef::Tensor<float, 2> uniform_matrix(index_t rows, index_t cols, std::mt19937& gen) {
  auto t = ef::Tensor<float, 2>::empty({rows, cols});
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = uniform(gen);
  return t;
}

void check_packed_weight_products(const SgemmKernel& kernel) {
  using ef::backend::detail::sgemm_kc;
  const index_t sgemm_nr = kernel.nr;
  REQUIRE(ef::backend::detail::packed_weights_supported());
  std::mt19937 gen(13);
  // Rows from the smallest the packed kernel takes (8) up; columns around the panel width and the column
  // block; k on both sides of the k block, so that blocks and panels of the packed copy start everywhere.
  const std::vector<Shape3> shapes{{8, 1, 1},
                                   {9, sgemm_nr - 1, 7},
                                   {13, sgemm_nr + 1, sgemm_kc},
                                   {40, 3 * sgemm_nr + 5, sgemm_kc + 1},
                                   {130, 70, 2 * sgemm_kc + 3},
                                   {64, ef::backend::detail::sgemm_nc + 9, 33},
                                   {200, 96, 64},
                                   // more rows than one block of the pool's shared-a path takes
                                   {ef::backend::detail::shared_block_rows + 49, 70, sgemm_kc + 5},
                                   // 4 row blocks over 2-3 column groups: the staggered order of the blocks
                                   // must still compute each once (beta below would count a block twice)
                                   {3 * ef::backend::detail::shared_block_rows + 5, 5 * sgemm_nr + 3, 40}};
  const eftest::RestoreThreadCount restore_threads;
  const eftest::RestoreValue restore_cut(ef::backend::detail::tile_per_thread_below);
  std::size_t ran = 0;
  // Every shape through both ways of cutting a product for the pool: blocks handed out one at a time, and one
  // tile a thread (which the library takes for small products only).
  for (const double cut : {0.0, std::numeric_limits<double>::infinity()})
    for (const auto& s : shapes)
      for (int b_layout = 0; b_layout < 3; ++b_layout)  // row-major, column-major (Linear's w.t()), strided
        for (int a_layout = 0; a_layout < 3;
             ++a_layout) {  // row-major (read in place), column-major, rows apart
          const auto a = a_layout == 0   ? uniform_matrix(s.m, s.k, gen)
                         : a_layout == 1 ? uniform_matrix(s.k, s.m, gen).t()
                                         : uniform_matrix(s.m, s.k + 3, gen).narrow(1, 1, s.k);
          const auto stored = b_layout == 1 ? uniform_matrix(s.n, s.k, gen) : uniform_matrix(s.k, 2 * s.n, gen);
          const auto b = b_layout == 0   ? stored.narrow(1, 0, s.n)
                         : b_layout == 1 ? stored.t()
                                         : stored.slice(1, 0, 2 * s.n, 2);
          const ef::PackedMatrix packed(b);
          REQUIRE(packed.kernel() == &kernel);
          REQUIRE(packed.matches(b));
          auto bias = uniform_matrix(1, s.n, gen).reshape(ef::Shape<1>{s.n});
          const ef::backend::Epilogue<float> epilogue{&bias, ef::backend::Activation::gelu_tanh};
          for (int threads : {1, 2, 3}) {
            ef::set_num_threads(threads);
            ef::backend::detail::tile_per_thread_below = cut;
            const auto expected = ef::backend::gemm(a, b, epilogue);
            const auto got = ef::backend::gemm(a, b, &packed, epilogue);
            REQUIRE_MESSAGE(std::memcmp(got.data(), expected.data(), sizeof(float) * s.m * s.n) == 0,
                            "m n k " << s.m << " " << s.n << " " << s.k << ", b layout " << b_layout
                                     << ", a layout " << a_layout << ", " << threads << " threads, tile a thread below "
                                     << cut);
            // Accumulating into part of a wider output (alpha, beta), with and without the bias and
            // activation (the packed kernel adds the bias as it stores its last k block, after beta's term),
            // on the pool and on the calling thread alone.
            for (const auto tiling : {ef::backend::Tiling::pool, ef::backend::Tiling::calling_thread})
              for (const bool with_epilogue : {false, true}) {
                const ef::backend::Epilogue<float> accumulating =
                    with_epilogue ? epilogue : ef::backend::Epilogue<float>{};
                auto wide = uniform_matrix(s.m, s.n + 5, gen);
                auto into = wide.narrow(1, 2, s.n);
                auto wide_expected = wide.clone();
                auto into_expected = wide_expected.narrow(1, 2, s.n);
                ef::backend::gemm(a, b, into_expected, -0.5f, 0.75f, accumulating);
                ef::backend::gemm(a, b, &packed, into, -0.5f, 0.75f, accumulating, tiling);
                REQUIRE_MESSAGE(
                    std::memcmp(wide.data(), wide_expected.data(), sizeof(float) * wide.numel()) == 0,
                    "into a view, m n k " << s.m << " " << s.n << " " << s.k << ", b layout " << b_layout
                                          << ", " << threads << " threads, pool "
                                          << (tiling == ef::backend::Tiling::pool) << ", epilogue "
                                          << with_epilogue << ", tile a thread below " << cut);
              }
            ++ran;
          }
        }
  eftest::check_ran(ran, 2 * shapes.size() * 3 * 3 * 3, "packed-weight products");
}

}  // namespace

TEST_CASE(
    "products with a packed weight have the bits of the unpacked product for every layout, edge and thread "
    "count") {
  for_each_kernel(check_packed_weight_products);
}


namespace {

void check_aliased_rows(const SgemmKernel& kernel) {
  namespace bd = ef::backend::detail;
  std::mt19937 gen(17);
  // Lines the AVX-512 register block keeps in the L1 set that rows 4 KiB apart share, its 12 rows of a and 8
  // of its panel of b's: more than the set's ways evict each other, which costs more than the copy except on
  // Intel's 12-way L1s. The AVX2 block's 6 + 4 lines cost less than the copy even on 8 ways (AMD Zen 4).
  const int ways = ef::backend::l1_data_ways() > 0 ? ef::backend::l1_data_ways() : 12;
  const bool copies_such_rows =
      kernel.isa == CpuIsa::avx512 && ways < 20 && !(ef::backend::cpu_is_intel() && ways >= 12);
  CHECK(bd::copies_rows_4k_apart(kernel) == copies_such_rows);
  std::size_t ran = 0;
  // k = 1024: rows 4 KiB apart as stored; k = 1000 read from rows 2048 floats apart (a narrow view).
  for (const index_t k : {1024, 1000})
    for (const index_t n : {bd::unaliasing_min_cols + 44, bd::unaliasing_min_cols - 56})
      for (const index_t m : {9, 40}) {
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(m);
        const auto stored = uniform_matrix(m, k == 1024 ? k : 2048, gen);
        const auto a = stored.narrow(1, 0, k);
        auto plain = uniform_matrix(m, k + 3, gen).narrow(1, 0, k);  // rows k + 3 floats apart
        for (index_t i = 0; i < m; ++i)
          std::memcpy(plain.data() + i * plain.strides()[0], a.data() + i * a.strides()[0],
                      sizeof(float) * static_cast<std::size_t>(k));
        // What the products read: a copy with spaced rows exactly when the AVX-512 kernel computes enough
        // columns, holding a's values.
        ef::Tensor<float, 2> unused, spaced;
        const auto operand = bd::matrix_operand(a, unused);
        const auto read = bd::unaliased_left_operand(&kernel, operand, m, k, n, true, spaced);
        const bool copies = copies_such_rows && n >= bd::unaliasing_min_cols;
        CHECK((read.data != a.data()) == copies);
        // The copy itself, whether or not this machine makes it, on the pool and on the calling thread.
        for (const bool on_pool : {true, false}) {
          ef::Tensor<float, 2> keep;
          const auto copy = bd::spaced_rows_copy(operand, m, k, on_pool, keep);
          CHECK(copy.data == keep.data());
          CHECK(copy.info.outer_stride == (k == 1024 ? k + bd::row_spacing_floats : k));
          CHECK(copy.info.outer_stride % bd::aliasing_row_floats != 0);
          bool same = true;
          for (index_t i = 0; i < m; ++i)
            same = same && std::memcmp(copy.data + i * copy.info.outer_stride, a.data() + i * a.strides()[0],
                                       sizeof(float) * static_cast<std::size_t>(k)) == 0;
          CHECK(same);
        }
        if (copies) CHECK(read.info.outer_stride == (k == 1024 ? k + bd::row_spacing_floats : k));
        // The products' bits equal those of the same values read from rows k + 3 apart: per call, with the
        // weight packed (on the pool and on the calling thread) and held as bfloat16 (widened into panels).
        const auto b = uniform_matrix(n, k, gen).t();
        const ef::PackedMatrix packed(b);
        auto rounded = b.contiguous();
        ef::round_to_bf16_(rounded);
        const ef::Bf16Matrix b16(rounded);
        for (const int threads : {1, 2}) {
          ef::set_num_threads(threads);
          const auto expect_per_call = ef::backend::gemm(plain, b);
          const auto expect_packed = ef::backend::gemm(plain, b, &packed);
          auto expect_b16 = ef::Tensor<float, 2>::empty({m, n});
          ef::backend::gemm(plain, b16, expect_b16);
          auto got = ef::Tensor<float, 2>::empty({m, n});
          const auto bits_equal = [&](const ef::Tensor<float, 2>& expected) {
            return std::memcmp(got.data(), expected.data(), sizeof(float) * static_cast<std::size_t>(m * n)) == 0;
          };
          ef::backend::gemm(a, b, got);
          CHECK(bits_equal(expect_per_call));
          for (const auto tiling : {ef::backend::Tiling::pool, ef::backend::Tiling::calling_thread}) {
            ef::backend::gemm(a, b, &packed, got, 1.0f, 0.0f, {}, tiling);
            CHECK(bits_equal(expect_packed));
          }
          ef::backend::gemm(a, b16, got);
          CHECK(bits_equal(expect_b16));
          ++ran;
        }
      }
  ef::set_num_threads(1);
  eftest::check_ran(ran, 2 * 2 * 2 * 2, "widths, column counts, row counts and thread counts");
}

}  // namespace

TEST_CASE(
    "a row-major a whose rows lie 4 KiB apart is read from a spaced copy where that pays, with the bits of any "
    "other spacing") {
  const eftest::RestoreThreadCount restore_threads;
  for_each_kernel(check_aliased_rows);
}
TEST_CASE("a packed weight: few-row products read the float weight, and a stale or foreign copy is refused") {
  for_each_kernel([](const SgemmKernel&) {
    std::mt19937 gen(17);
    auto w = uniform_matrix(40, 24, gen);  // Linear's (out, in)
    const ef::PackedMatrix packed(w.t());
    REQUIRE(packed.rows() == 24);
    REQUIRE(packed.cols() == 40);
    // 3 rows: decoding's products, which stream the float weight (gemv.hpp) and never read the packed copy.
    const auto few = uniform_matrix(3, 24, gen);
    const auto expected_few = ef::backend::gemm(few, w.t());
    const auto got_few = ef::backend::gemm(few, w.t(), &packed);
    CHECK(std::memcmp(got_few.data(), expected_few.data(), sizeof(float) * expected_few.numel()) == 0);
    const auto x = uniform_matrix(16, 24, gen);
    // A copy packed from another matrix of another shape.
    const ef::PackedMatrix other(uniform_matrix(24, 41, gen));
    CHECK_THROWS_AS(ef::backend::gemm(x, w.t(), &other), ef::shape_error);
    // The weight changed after packing (an optimiser step would change every element; one sampled element
    // is enough to be caught): the product throws rather than using stale values.
    w(20, 12) += 1.0f;
    CHECK_THROWS_WITH_AS(ef::backend::gemm(x, w.t(), &packed), doctest::Contains("pack_weights() again"),
                         std::logic_error);
    // The shapes of the operands themselves are checked as for any product.
    CHECK_THROWS_AS(ef::backend::gemm(uniform_matrix(16, 23, gen), w.t(), &packed), ef::shape_error);
  });
}

TEST_CASE(
    "weights packed side by side: one product has the bits of one product per weight, and a stale part is "
    "refused") {
  for_each_kernel([](const SgemmKernel& kernel) {
    // BERT's query, key and value weights, in Linear's transposed layout and row-major: parts of 40, 70 and
    // 33 columns (a register panel straddles two parts, so their concatenation is packed) and of 64, 32 and
    // 45 (whole panels, each part packed in place); a with a ragged row count; 1-3 threads.
    std::mt19937 gen(23);
    const eftest::RestoreThreadCount restore_threads;
    std::size_t ran = 0;
    for (const auto& widths : {std::vector<ef::index_t>{40, 70, 33}, std::vector<ef::index_t>{64, 32, 45}}) {
      CAPTURE(widths[0]);
      std::vector<ef::Tensor<float, 2>> parts{uniform_matrix(widths[0], 24, gen).t(),
                                              uniform_matrix(24, widths[1], gen),
                                              uniform_matrix(widths[2], 24, gen).t()};
      const ef::index_t n = widths[0] + widths[1] + widths[2];
      const auto packed = ef::PackedMatrix::side_by_side(parts);
      REQUIRE(packed.kernel() == &kernel);
      const auto bias = uniform_matrix(1, n, gen).reshape(ef::Shape<1>{n});
      for (const ef::index_t m : {5, 8, 29, 300}) {  // 5: too few rows for the packed kernel
        const auto a = uniform_matrix(m, 24, gen);
        auto expected = ef::Tensor<float, 2>::empty({m, n});
        for (ef::index_t i = 0, c0 = 0; i < 3; c0 += parts[i].shape()[1], ++i) {
          auto out = expected.narrow(1, c0, parts[i].shape()[1]);
          const auto part_bias = bias.narrow(0, c0, parts[i].shape()[1]);
          ef::backend::gemm(a, parts[i], out, 1.0f, 0.0f, {&part_bias, ef::backend::Activation::gelu_erf});
        }
        for (const int threads : {1, 2, 3}) {
          ef::set_num_threads(threads);
          auto got = ef::Tensor<float, 2>::empty({m, n});
          ef::backend::gemm(a, packed, got, {&bias, ef::backend::Activation::gelu_erf});
          if (!packed.serves(m)) {
            // Too few rows for the float products to take the packed kernel; the packed copy is read by it
            // anyway, so each row has its bits from a product of many rows: here a with zero rows after it.
            REQUIRE(m < 8);
            auto padded = ef::zeros<float>({12, 24});
            padded.narrow(0, 0, m).copy_(a);
            auto many = ef::Tensor<float, 2>::empty({12, n});
            ef::backend::gemm(padded, packed, many, {&bias, ef::backend::Activation::gelu_erf});
            const auto rows_of_many = many.narrow(0, 0, m).contiguous();
            REQUIRE_MESSAGE(std::memcmp(got.data(), rows_of_many.data(), sizeof(float) * got.numel()) == 0,
                            m << " rows, " << threads << " threads");
            ++ran;
            continue;
          }
          REQUIRE_MESSAGE(std::memcmp(got.data(), expected.data(), sizeof(float) * got.numel()) == 0,
                          m << " rows, " << threads << " threads");
          ++ran;
        }
      }
      REQUIRE(packed.rows() == 24);
      REQUIRE(packed.cols() == n);
      CHECK(packed.matches(parts));
      CHECK_FALSE(packed.matches(parts[0]));  // one matrix is not the three side by side
      auto a = uniform_matrix(16, 24, gen);
      auto c = ef::Tensor<float, 2>::empty({16, n - 1});
      const std::string wrong_output = "output [16, " + std::to_string(n - 1) + "]";
      CHECK_THROWS_WITH_AS(ef::backend::gemm(a, packed, c), doctest::Contains(wrong_output.c_str()),
                           ef::shape_error);
      parts[1](23, widths[1] - 1) += 1.0f;  // the last element of the middle part
      CHECK_FALSE(packed.matches(parts));
    }
    eftest::check_ran(ran, 2 * 12, "side-by-side products");
    CHECK_THROWS_AS(ef::PackedMatrix::side_by_side({uniform_matrix(24, 5, gen), uniform_matrix(23, 5, gen)}),
                    ef::shape_error);
  });
}

TEST_CASE("a product with a packed weight reads the packed copy, not the float weight") {
  for_each_kernel([](const SgemmKernel&) {
    // The bit-equality test above would also pass if gemm silently used the float weight. Here an element
    // that is not among the three sampled ones changes after packing (which the staleness check cannot see):
    // the product must still give the bits of the weight as it was packed, on every thread count.
    std::mt19937 gen(19);
    std::size_t ran = 0;
    for (const bool transposed : {false, true}) {  // Linear's w.t() and Conv1D's (in, out) weight
      auto stored = transposed ? uniform_matrix(70, 40, gen) : uniform_matrix(40, 70, gen);
      const auto b = [&] { return transposed ? stored.t() : stored; };
      const ef::PackedMatrix packed(b());
      const auto a = uniform_matrix(33, 40, gen);
      const auto as_packed = ef::backend::gemm(a, b());
      auto changed = b();
      changed(5, 9) += 1.0f;  // row 5, column 9: none of (0, 0), (20, 35), (39, 69)
      REQUIRE(packed.matches(b()));
      const auto as_changed = ef::backend::gemm(a, b());
      REQUIRE(std::memcmp(as_changed.data(), as_packed.data(), sizeof(float) * as_packed.numel()) != 0);
      const eftest::RestoreThreadCount restore_threads;
      for (int threads : {1, 2}) {
        ef::set_num_threads(threads);
        const auto got = ef::backend::gemm(a, b(), &packed);
        CHECK_MESSAGE(std::memcmp(got.data(), as_packed.data(), sizeof(float) * as_packed.numel()) == 0,
                      (transposed ? "transposed" : "row-major") << " weight, " << threads << " threads");
        ++ran;
      }
    }
    eftest::check_ran(ran, 4, "products after an unsampled change");
  });
}

TEST_CASE(
    "Linear and Conv1D with packed weights: the same outputs, none while recording, and a stale copy is "
    "refused") {
  for_each_kernel([](const SgemmKernel&) {
    ef::manual_seed(21);
    ef::nn::Linear<float> linear(48, 40);
    ef::nn::Conv1D<float> conv(48, 40);
    const auto x = ef::randn<float>({3, 7, 48});  // 21 rows: the packed kernel's products
    linear.eval();
    conv.eval();
    const auto linear_before = linear.forward(x);
    const auto conv_before = conv.forward(x);
    linear.pack_weights();
    conv.pack_weights();
    REQUIRE(linear.packed_weight() != nullptr);
    REQUIRE(conv.packed_weight() != nullptr);
    const auto linear_after = linear.forward(x);
    const auto conv_after = conv.forward(x);
    CHECK(std::memcmp(linear_after.data(), linear_before.data(), sizeof(float) * linear_before.numel()) == 0);
    CHECK(std::memcmp(conv_after.data(), conv_before.data(), sizeof(float) * conv_before.numel()) == 0);
    // Training: the optimiser changes the weight, and forwards that record for backward read the float
    // weight.
    linear.train();
    linear.weight.data(0, 0) -= 0.25f;
    const auto trained = linear.forward(x);
    linear.eval();
    {
      ef::InferenceMode inference;
      CHECK_THROWS_WITH_AS(linear.forward(x), doctest::Contains("changed since it was packed"),
                           std::logic_error);
    }
    linear.pack_weights();
    const auto repacked = linear.forward(x);
    CHECK(std::memcmp(repacked.data(), trained.data(), sizeof(float) * trained.numel()) == 0);
  });
}

TEST_CASE("a weight packed for one kernel is read by that kernel only, and none is packed without a kernel") {
  const auto kernels = kernels_on_this_cpu();
  if (kernels.empty()) return;
  std::mt19937 gen(29);
  const auto w = uniform_matrix(40, 24, gen), a = uniform_matrix(16, 24, gen);
  ef::PackedMatrix packed;
  ef::Tensor<float, 2> expected;
  {
    const CpuIsaCap cap(kernels.front()->isa);
    packed = ef::PackedMatrix(w.t());
    REQUIRE(packed.kernel() == kernels.front());
    CHECK(packed.serves(16));
    CHECK_FALSE(packed.serves(7));  // too few rows for any packed kernel
    expected = ef::backend::gemm(a, w.t(), &packed);
  }
  std::size_t ran = 0;
  for (CpuIsa other : {CpuIsa::avx2, CpuIsa::baseline}) {
    if (other == kernels.front()->isa) continue;
    const CpuIsaCap cap(other);
    const std::string isa = ef::backend::cpu_isa_name(other);
    CAPTURE(isa);
    CHECK_FALSE(packed.serves(16));
    auto c = ef::Tensor<float, 2>::empty({16, 40});
    // gemm(a, b, &packed) reads b instead (with AVX2 the same bits: the kernels agree)...
    const auto got = ef::backend::gemm(a, w.t(), &packed);
    if (other == CpuIsa::avx2)
      CHECK(std::memcmp(got.data(), expected.data(), sizeof(float) * got.numel()) == 0);
    // ... and a weight that exists only packed is read back and multiplied as the float weight is.
    ef::backend::gemm(a, packed, c);
    const auto as_float = ef::backend::gemm(a, w.t());
    CHECK(std::memcmp(c.data(), as_float.data(), sizeof(float) * c.numel()) == 0);
    if (other == CpuIsa::baseline) {
      CHECK(ef::PackedMatrix(w.t()).empty());
      CHECK(std::string(ef::backend::gemm_library()) == "Eigen");
      CHECK_FALSE(ef::backend::reads_packed_weight(16));
    }
    ++ran;
  }
  eftest::check_ran(ran, kernels.size() == 2 ? 2 : 1, "capped instruction sets");
}

TEST_CASE("set_max_cpu_isa never chooses more than the CPU has, and reports what it chose") {
  const CpuIsa saved = ef::backend::cpu_isa(), detected = ef::backend::detected_cpu_isa();
  for (CpuIsa cap : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
    const CpuIsa chosen = ef::backend::set_max_cpu_isa(cap);
    CHECK(static_cast<int>(chosen) == std::min(static_cast<int>(cap), static_cast<int>(detected)));
    CHECK(ef::backend::cpu_isa() == chosen);
    CHECK((ef::backend::detail::sgemm_kernel() == nullptr) == (chosen == CpuIsa::baseline));
  }
  ef::backend::set_max_cpu_isa(saved);
}
