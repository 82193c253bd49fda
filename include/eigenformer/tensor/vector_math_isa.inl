// The element-wise kernels of vector_math.hpp, written once against SimdFloat (simd.hpp) and compiled once
// per instruction set by for_each_isa.inl. No include guard, on purpose.
//
// Bits: every output element is the same sequence of IEEE operations (fused multiply-adds included) on
// every instruction set, and the sums run over 16 lanes in one fixed order (SimdFloat::sum16), so the AVX-512
// and AVX2 kernels give the same bits; thread counts do not enter (callers split whole rows or ranges).

struct VectorMath {
  using F = SimdFloat;
  using reg = F::reg;
  static constexpr int width = F::width;

  // log of float's smallest normal number, -126 ln 2: below it exp_or_zero gives 0.
  static constexpr float exp_lowest = -87.33654475f;

  // exp(x) for x in [exp_lowest, 88] to about an ulp; 0 below (-inf included); arguments above 88 are
  // taken as 88 (the callers never pass them); NaN stays NaN. x = n ln 2 + r with n whole and |r| <= ln 2 / 2;
  // exp(r) by its Taylor series to r^7 (the remainder is below 6e-9 relative, a tenth of an ulp), times 2^n
  // built in the exponent field.
  static reg exp_or_zero(reg x) {
    const reg lowest = F::set1(exp_lowest);
    const reg xc = F::max(lowest, F::min(F::set1(88.0f), x));  // x second: a NaN passes both
    // Adding 1.5 * 2^23 rounds x / ln 2 to a whole number (to nearest, ties to even); subtracting it again
    // gives that number back as a float.
    const reg shifter = F::set1(12582912.0f);
    const reg n = F::sub(F::fmadd(xc, F::set1(1.44269504088896341f), shifter), shifter);
    // r = x - n ln 2 with ln 2 in two parts (Cody and Waite): the first has few enough bits that n times it
    // is exact for |n| <= 127.
    reg r = F::fnmadd(n, F::set1(0.693359375f), xc);
    r = F::fnmadd(n, F::set1(-2.12194440e-4f), r);
    reg p = F::set1(1.0f / 5040.0f);
    p = F::fmadd(p, r, F::set1(1.0f / 720.0f));
    p = F::fmadd(p, r, F::set1(1.0f / 120.0f));
    p = F::fmadd(p, r, F::set1(1.0f / 24.0f));
    p = F::fmadd(p, r, F::set1(1.0f / 6.0f));
    p = F::fmadd(p, r, F::set1(0.5f));
    p = F::fmadd(p, r, F::set1(1.0f));
    p = F::fmadd(p, r, F::set1(1.0f));
    return F::select(F::less(x, lowest), F::zero(), F::mul(p, F::exp2_int(n)));
  }

  // GELU's Phi(x) = erfc(-x / sqrt 2) / 2 and E = exp(-x^2 / 2), the exp both the forward and the
  // derivative need. With a = |x| / sqrt 2, erfc(a) = R(a) exp(-a^2), R(a) = P(a) / Q(a) fitted by
  // tools/fit_erfc_scaled.py (relative error 3.8e-7 evaluated in float): Phi = R E / 2 for x < 0, 1 - R E / 2
  // for x >= 0. Unlike 1 + erf(x / sqrt 2), nothing cancels in the negative tail, so Phi keeps a few ulps
  // of relative accuracy there. x^2 is carried as an exact sum hi + lo (a fused multiply-add gives lo), as
  // rounding x^2 alone would cost exp(-x^2 / 2) a relative error of x^2 2^-24.
  static void gelu_phi(reg x, reg& phi, reg& e) {
    const reg xa = F::min(F::set1(14.0f), F::abs(x));  // exp(-98) is 0 in float already; x second for NaN
    const reg sq = F::mul(xa, xa);
    const reg sq_lo = F::fmadd(xa, xa, F::sub(F::zero(), sq));  // xa^2 - sq, exactly
    const reg e0 = exp_or_zero(F::mul(F::set1(-0.5f), sq));
    e = F::fnmadd(e0, F::mul(F::set1(0.5f), sq_lo), e0);  // exp(-sq / 2) (1 - sq_lo / 2)
    const reg a = F::mul(xa, F::set1(0.70710678118654752f));
    reg p = F::set1(0.03279925510287285f);
    p = F::fmadd(p, a, F::set1(0.22921665012836456f));
    p = F::fmadd(p, a, F::set1(0.7315912842750549f));
    p = F::fmadd(p, a, F::set1(1.2383919954299927f));
    p = F::fmadd(p, a, F::set1(1.0f));
    reg q = F::set1(0.058134470134973526f);
    q = F::fmadd(q, a, F::set1(0.4063023030757904f));
    q = F::fmadd(q, a, F::set1(1.3253483772277832f));
    q = F::fmadd(q, a, F::set1(2.4021971225738525f));
    q = F::fmadd(q, a, F::set1(2.366771697998047f));
    q = F::fmadd(q, a, F::set1(1.0f));
    const reg half_tail = F::mul(F::mul(F::set1(0.5f), F::div(p, q)), e);
    phi = F::select(F::greater_equal(x, F::zero()), F::sub(F::set1(1.0f), half_tail), half_tail);
  }

  // exp(-2u) for the tanh GELU's u = sqrt(2/pi) (x + 0.044715 x^3), at most exp(88) (backend.hpp's
  // exp_minus_2u says why the float forms are written with it).
  static reg exp_minus_2u(reg x) {
    const reg x3 = F::mul(F::mul(x, x), x);
    const reg u = F::mul(F::set1(0.79788456080286536f), F::fmadd(F::set1(0.044715f), x3, x));
    return exp_or_zero(F::mul(F::set1(-2.0f), u));
  }

  // out[i] = Op::apply(g[i], in[i]) over n floats (g read as 0 when null), width at a time, the last few
  // with masked loads and stores; in may equal out. The operations are classes, not lambdas: GCC compiles a
  // lambda's body without its enclosing target region, and a vector register passed to it then changes ABI.
  template <class Op>
  static void map(const Op& op, const float* g, const float* in, float* out, index_t n) {
    index_t i = 0;
    for (; i + width <= n; i += width) F::store(out + i, op.apply(g ? F::load(g + i) : F::zero(), F::load(in + i)));
    if (i < n) {
      const int rest = static_cast<int>(n - i);
      F::store_first(out + i, op.apply(g ? F::load_first(g + i, rest) : F::zero(), F::load_first(in + i, rest)), rest);
    }
  }

  struct GeluErf {
    reg apply(reg, reg x) const {
      reg phi, e;
      gelu_phi(x, phi, e);
      return F::mul(x, phi);
    }
  };
  // g (Phi(x) + x phi(x)), phi(x) = E / sqrt(2 pi).
  struct GeluErfBackward {
    reg apply(reg g, reg x) const {
      reg phi, e;
      gelu_phi(x, phi, e);
      return F::mul(g, F::fmadd(F::mul(x, e), F::set1(0.39894228040143268f), phi));
    }
  };
  // x (1 + tanh u) / 2 = x / (1 + exp(-2u)).
  struct GeluTanh {
    reg apply(reg, reg x) const { return F::div(x, F::add(F::set1(1.0f), exp_minus_2u(x))); }
  };
  // g ((1 + tanh u) / 2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)), with s = (1 + tanh u) / 2 =
  // 1 / (1 + e) and 1 - tanh^2 u = 4 s (e s), e = exp(-2u), as backend.hpp's float form.
  struct GeluTanhBackward {
    reg apply(reg g, reg x) const {
      const reg e = exp_minus_2u(x);
      const reg s = F::div(F::set1(1.0f), F::add(F::set1(1.0f), e));
      const reg sech2 = F::mul(F::mul(F::set1(4.0f), s), F::mul(e, s));
      const reg slope = F::fmadd(F::set1(3.0f * 0.044715f), F::mul(x, x), F::set1(1.0f));
      const reg right = F::mul(F::mul(F::mul(F::set1(0.5f), x), sech2), F::mul(F::set1(0.79788456080286536f), slope));
      // Saturated (|x| > ~10): the term is below float's range, but x^2 may have overflowed to inf.
      return F::mul(g, F::add(s, F::select(F::less(sech2, F::set1(1e-30f)), F::zero(), right)));
    }
  };
  struct ExpShifted {
    reg shift;
    reg apply(reg, reg x) const { return exp_or_zero(F::sub(x, shift)); }
  };
  struct DivideBy {
    reg divisor;
    reg apply(reg, reg y) const { return F::div(y, divisor); }
  };

  static void gelu_erf(const float* in, float* out, index_t n) { map(GeluErf{}, nullptr, in, out, n); }
  static void gelu_erf_backward(const float* g, const float* in, float* out, index_t n) {
    map(GeluErfBackward{}, g, in, out, n);
  }
  static void gelu_tanh(const float* in, float* out, index_t n) { map(GeluTanh{}, nullptr, in, out, n); }
  static void gelu_tanh_backward(const float* g, const float* in, float* out, index_t n) {
    map(GeluTanhBackward{}, g, in, out, n);
  }
  // row[i] = exp(row[i] - shift), 0 where that is below exp_lowest.
  static void exp_shifted(float* row, index_t n, float shift) { map(ExpShifted{F::set1(shift)}, nullptr, row, row, n); }

  // Runs acc.add(v, r, i, lanes) over p[0, n) in groups of 16 floats: v is the register of the group's
  // floats from p[i] on, r its index within the group (0 to F::per16 - 1), lanes how many of its floats lie
  // before n (the others read as `fill`). Lane l of accumulator r so sees the same elements on every
  // instruction set.
  template <class Accumulator>
  static void for_each_group(const float* p, index_t n, float fill, Accumulator& acc) {
    index_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int r = 0; r < F::per16; ++r) acc.add(F::load(p + i + r * width), r, i + r * width, width);
    if (i == n) return;
    alignas(64) float last[16];
    for (index_t l = 0; l < 16; ++l) last[l] = i + l < n ? p[i + l] : fill;
    for (int r = 0; r < F::per16; ++r) {
      const index_t start = i + r * width;
      acc.add(F::load(last + r * width), r, start, static_cast<int>(std::clamp<index_t>(n - start, 0, width)));
    }
  }

  struct Sum {
    reg acc[F::per16];
    Sum() {
      for (reg& a : acc) a = F::zero();
    }
    void add(reg v, int r, index_t, int) { acc[r] = F::add(acc[r], v); }
  };
  static float sum(const float* p, index_t n) {
    Sum total;
    for_each_group(p, n, 0.0f, total);
    return F::sum16(total.acc);
  }

  struct Max {
    reg acc[F::per16];
    Max() {
      for (reg& a : acc) a = F::set1(-std::numeric_limits<float>::infinity());
    }
    void add(reg v, int r, index_t, int) { acc[r] = F::max(acc[r], v); }
  };

  // out[i] = exp(in[i] - m) and their sum; `denormal` is set when some in[i] - m lies below exp_lowest
  // without in[i] being -inf (its exp, a denormal, is libm's: see softmax).
  struct SoftmaxNumerators {
    float* out;
    reg m, lowest = F::set1(exp_lowest), minus_inf = F::set1(-std::numeric_limits<float>::infinity());
    Sum total;
    bool denormal = false;
    SoftmaxNumerators(float* row, float max) : out(row), m(F::set1(max)) {}
    void add(reg v, int r, index_t i, int lanes) {
      const reg d = F::sub(v, m);
      const reg y = exp_or_zero(d);
      denormal = denormal || F::any(F::both(F::less(d, lowest), F::not_equal(v, minus_inf)));
      total.add(y, r, i, lanes);
      if (lanes == width) F::store(out + i, y);
      else if (lanes > 0) F::store_first(out + i, y, lanes);
    }
  };

  // out = softmax(in) over n floats (n >= 1; in and out do not overlap), as reduce.hpp's softmax_lane: a
  // row of only -inf gives zeros; exp(x - max) below float's normal range comes from libm (a denormal), as
  // -inf gives exactly 0.
  static void softmax(const float* in, float* out, index_t n) {
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    Max top;
    for_each_group(in, n, neg_inf, top);
    const float m = F::max16(top.acc);
    if (m == neg_inf) {
      std::fill(out, out + n, 0.0f);
      return;
    }
    SoftmaxNumerators numerators(out, m);
    for_each_group(in, n, neg_inf, numerators);
    const float total = F::sum16(numerators.total.acc);
    map(DivideBy{F::set1(total)}, nullptr, out, out, n);
    if (numerators.denormal)
      for (index_t i = 0; i < n; ++i)
        if (in[i] - m < exp_lowest && in[i] != neg_inf) out[i] = std::exp(in[i] - m) / total;
  }

  // Every operation one IEEE rounding, in torch's order: no fused multiply-add, each product rounded before
  // its sum (F::rounded keeps GCC from fusing them, as train/optimizers.hpp's loops are kept from it).
  static reg adamw_lanes(reg x, reg g, reg& m, reg& v, float* vmax_at, int lanes, const AdamWStep& c) {
    const reg decayed = F::rounded(F::mul(x, F::set1(c.decay)));  // param.mul_(1 - lr wd)
    m = F::add(F::rounded(F::mul(m, F::set1(c.beta1))),
               F::rounded(F::mul(F::set1(c.one_minus_beta1), g)));  // m beta1 + (1 - beta1) g
    v = F::add(F::rounded(F::mul(v, F::set1(c.beta2))),
               F::rounded(F::mul(F::mul(F::set1(c.one_minus_beta2), g), g)));  // addcmul_
    reg second = v;
    if (vmax_at) {  // torch.maximum of the running max and v, kept where v is not greater (NaN included)
      const reg old = lanes == width ? F::load(vmax_at) : F::load_first(vmax_at, lanes);
      second = F::select(F::less(old, v), v, old);
      if (lanes == width) F::store(vmax_at, second);
      else F::store_first(vmax_at, second, lanes);
    }
    const reg denom = F::add(F::div(F::sqrt(second), F::set1(c.bc2_sqrt)), F::set1(c.eps));
    return F::add(decayed, F::div(F::mul(F::set1(c.neg_step_size), m), denom));  // addcdiv
  }
  static void adamw(index_t n, float* x, const float* g, float* m, float* v, float* vmax, const AdamWStep& c) {
    index_t i = 0;
    for (; i + width <= n; i += width) {
      reg mi = F::load(m + i), vi = F::load(v + i);
      F::store(x + i, adamw_lanes(F::load(x + i), F::load(g + i), mi, vi, vmax ? vmax + i : nullptr, width, c));
      F::store(m + i, mi);
      F::store(v + i, vi);
    }
    if (i < n) {
      const int rest = static_cast<int>(n - i);
      reg mi = F::load_first(m + i, rest), vi = F::load_first(v + i, rest);
      const reg xi = adamw_lanes(F::load_first(x + i, rest), F::load_first(g + i, rest), mi, vi,
                                 vmax ? vmax + i : nullptr, rest, c);
      F::store_first(x + i, xi, rest);
      F::store_first(m + i, mi, rest);
      F::store_first(v + i, vi, rest);
    }
  }

  // out[i] = kept where the 53-bit number of words 2i and 2i + 1 is below threshold, else 0 (random.hpp's
  // bernoulli_fill; the last few elements by the same formula one at a time).
  static void bernoulli(const std::uint32_t* words, float* out, index_t n, std::uint64_t threshold, float kept) {
    const reg k = F::set1(kept);
    index_t i = 0;
    for (; i + width <= n; i += width) F::store(out + i, F::below_threshold(words + 2 * i, threshold, k));
    for (; i < n; ++i) {
      const std::uint64_t v = (std::uint64_t{words[2 * i] & 0x1FFFFFu} << 32) | words[2 * i + 1];
      out[i] = v < threshold ? kept : 0.0f;
    }
  }

  // LayerNorm (nn/layernorm.hpp): its portable loops' operations in the same order, so the same bits. The
  // sums are backend.hpp's sum_in_double term for term: eight running sums in double (lane u takes the terms
  // j = u mod 8 of the whole groups of eight), added as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)), then the
  // last n mod 8 terms one at a time. Every product that meets a sum is rounded on its own first, as the
  // portable loops' are in a build without FMA (F::rounded says why that needs saying).
  using F8 = avx2::SimdFloat;  // one group of eight floats
  using D8 = SimdDouble8;
  static double total_of(D8::reg acc) {
    alignas(64) double a[8];
    D8::store(a, acc);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  }
  static double rounded_scalar(double v) {
    __asm__("" : "+x"(v));
    return v;
  }
  static float rounded_scalar(float v) {
    __asm__("" : "+x"(v));
    return v;
  }

  static double sum_double(const float* p, index_t n) {
    D8::reg acc = D8::zero();
    index_t j = 0;
    for (; j + 8 <= n; j += 8) acc = D8::add(acc, D8::widen(F8::load(p + j)));
    double s = total_of(acc);
    for (; j < n; ++j) s += static_cast<double>(p[j]);
    return s;
  }
  // The sum of (p[j] - mean)^2, each square rounded to double before it is added.
  static double sum_squared_deviation(const float* p, index_t n, double mean) {
    const D8::reg m = D8::set1(mean);
    D8::reg acc = D8::zero();
    index_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const D8::reg d = D8::sub(D8::widen(F8::load(p + j)), m);
      acc = D8::add(acc, D8::rounded(D8::mul(d, d)));
    }
    double s = total_of(acc);
    for (; j < n; ++j) {
      const double d = static_cast<double>(p[j]) - mean;
      s += rounded_scalar(d * d);
    }
    return s;
  }

  // The first `count` lanes of p[j...] (all of them when count == width).
  static reg load_lanes(const float* p, index_t j, int count) {
    return count == width ? F::load(p + j) : F::load_first(p + j, count);
  }
  static void store_lanes(float* p, index_t j, int count, reg v) {
    if (count == width) F::store(p + j, v);
    else F::store_first(p + j, v, count);
  }
  // y = xhat weight + bias with xhat = (x - mean) rstd; bias 0 (+0) and weight 1 (no product) where null.
  static void layer_norm(const float* x, float* y, index_t n, float mean, float rstd, const float* weight,
                         const float* bias) {
    const reg mu = F::set1(mean), rs = F::set1(rstd);
    for (index_t j = 0; j < n; j += width) {
      const int count = static_cast<int>(std::min<index_t>(width, n - j));
      reg v = F::rounded(F::mul(F::sub(load_lanes(x, j, count), mu), rs));
      if (weight) v = F::rounded(F::mul(v, load_lanes(weight, j, count)));
      store_lanes(y, j, count, F::add(v, bias ? load_lanes(bias, j, count) : F::zero()));
    }
  }
  // dx = rstd (g' - mean(g') - xhat mean(g' xhat)) with g' = g weight (g where weight is null): the two
  // means in double from a first pass, then dx.
  static void layer_norm_backward(const float* x, const float* g, const float* weight, float mean, float rstd,
                                  float* dx, index_t n) {
    const F8::reg mu8 = F8::set1(mean), rs8 = F8::set1(rstd);
    D8::reg sum_g8 = D8::zero(), sum_gx8 = D8::zero();
    index_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const F8::reg xhat = F8::rounded(F8::mul(F8::sub(F8::load(x + j), mu8), rs8));
      const F8::reg gw = weight ? F8::rounded(F8::mul(F8::load(g + j), F8::load(weight + j))) : F8::load(g + j);
      const D8::reg gd = D8::widen(gw);
      sum_g8 = D8::add(sum_g8, gd);
      sum_gx8 = D8::add(sum_gx8, D8::rounded(D8::mul(gd, D8::widen(xhat))));
    }
    double sum_g = total_of(sum_g8), sum_gx = total_of(sum_gx8);
    for (; j < n; ++j) {
      const float xhat = rounded_scalar((x[j] - mean) * rstd);
      const float gw = weight ? rounded_scalar(g[j] * weight[j]) : g[j];
      sum_g += static_cast<double>(gw);
      sum_gx += rounded_scalar(static_cast<double>(gw) * static_cast<double>(xhat));
    }
    const reg mu = F::set1(mean), rs = F::set1(rstd);
    const reg mean_g = F::set1(static_cast<float>(sum_g / static_cast<double>(n)));
    const reg mean_gx = F::set1(static_cast<float>(sum_gx / static_cast<double>(n)));
    for (j = 0; j < n; j += width) {
      const int count = static_cast<int>(std::min<index_t>(width, n - j));
      const reg xhat = F::rounded(F::mul(F::sub(load_lanes(x, j, count), mu), rs));
      reg gw = load_lanes(g, j, count);
      if (weight) gw = F::rounded(F::mul(gw, load_lanes(weight, j, count)));
      store_lanes(dx, j, count, F::mul(rs, F::sub(F::sub(gw, mean_g), F::rounded(F::mul(xhat, mean_gx)))));
    }
  }
  // One row's share of the parameter gradients, in double: dweight[j] += g[j] xhat[j], dbias[j] += g[j]
  // (either may be null).
  static void layer_norm_param_grads(const float* g, const float* x, float mean, float rstd, double* dweight,
                                     double* dbias, index_t n) {
    const F8::reg mu8 = F8::set1(mean), rs8 = F8::set1(rstd);
    index_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const D8::reg gd = D8::widen(F8::load(g + j));
      if (dweight) {
        const F8::reg xhat = F8::rounded(F8::mul(F8::sub(F8::load(x + j), mu8), rs8));
        D8::store(dweight + j, D8::add(D8::load(dweight + j), D8::rounded(D8::mul(gd, D8::widen(xhat)))));
      }
      if (dbias) D8::store(dbias + j, D8::add(D8::load(dbias + j), gd));
    }
    for (; j < n; ++j) {
      if (dweight)
        dweight[j] += rounded_scalar(static_cast<double>(g[j]) * static_cast<double>(rounded_scalar((x[j] - mean) * rstd)));
      if (dbias) dbias[j] += static_cast<double>(g[j]);
    }
  }
  // Cross-entropy (train/losses.hpp): each exp in float, as PyTorch's log_softmax computes it, where the
  // portable loop takes two double exps an element (6.8 ns an element on one thread of an Intel Xeon, most of
  // a GPT-2-sized loss's time); the row's sum in double, so that a 50257-wide row loses no more than its exps'
  // own rounding.
  struct SumExpInDouble {
    reg m;
    D8::reg acc[2] = {D8::zero(), D8::zero()};
    explicit SumExpInDouble(float max) : m(F::set1(max)) {}
    // Lanes 0-7 of a group of 16 go to acc[0], lanes 8-15 to acc[1], on either set. (A template, so that
    // the branch for the other set's width is discarded.)
    template <class G = F>
    void add(typename G::reg v, int r, index_t, int) {
      const typename G::reg y = exp_or_zero(G::sub(v, m));
      if constexpr (G::width == 16) {
        acc[0] = D8::add(acc[0], D8::widen(G::low_half(y)));
        acc[1] = D8::add(acc[1], D8::widen(G::high_half(y)));
      } else {
        acc[r] = D8::add(acc[r], D8::widen(y));
      }
    }
  };
  static double log_sum_exp(const float* x, index_t n) {
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    Max top;
    for_each_group(x, n, neg_inf, top);
    // A row whose max is infinite gives NaN (inf - inf in the exps), as PyTorch's log_softmax does; so does
    // a NaN, through the sum.
    const float m = F::max16(top.acc);
    SumExpInDouble terms(m);
    for_each_group(x, n, neg_inf, terms);
    return static_cast<double>(m) + std::log(total_of(terms.acc[0]) + total_of(terms.acc[1]));
  }
  struct CrossEntropyGrad {
    reg hi, lo, off, scale;
    reg apply(reg, reg x) const {
      return F::mul(F::sub(exp_or_zero(F::sub(F::sub(x, hi), lo)), off), scale);
    }
  };
  static void cross_entropy_grad(const float* x, float* grad, index_t n, double lse, float off, index_t target,
                                 float on_target, float scale) {
    const float hi = static_cast<float>(lse);
    const float lo = static_cast<float>(lse - static_cast<double>(hi));
    const CrossEntropyGrad op{F::set1(hi), F::set1(lo), F::set1(off), F::set1(scale)};
    map(op, nullptr, x, grad, n);
    if (target < 0 || target >= n) return;
    // The target's element again with its one-hot term: the same operations with on_target subtracted
    // before the scaling, in lane 0 alone.
    const reg p = exp_or_zero(F::sub(F::sub(F::load_first(x + target, 1), op.hi), op.lo));
    F::store_first(grad + target, F::mul(F::sub(F::sub(p, op.off), F::set1(on_target)), op.scale), 1);
  }
};

inline constexpr VectorMathKernel vector_math_entry{this_isa,
                                                   &VectorMath::gelu_erf,
                                                   &VectorMath::gelu_erf_backward,
                                                   &VectorMath::gelu_tanh,
                                                   &VectorMath::gelu_tanh_backward,
                                                   &VectorMath::softmax,
                                                   &VectorMath::exp_shifted,
                                                   &VectorMath::sum,
                                                   &VectorMath::adamw,
                                                   &VectorMath::bernoulli,
                                                   &VectorMath::sum_double,
                                                   &VectorMath::sum_squared_deviation,
                                                   &VectorMath::layer_norm,
                                                   &VectorMath::layer_norm_backward,
                                                   &VectorMath::layer_norm_param_grads,
                                                   &VectorMath::log_sum_exp,
                                                   &VectorMath::cross_entropy_grad};
