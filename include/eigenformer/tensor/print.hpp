// Printing tensors exactly as PyTorch 1.13's repr(tensor) prints them.
//
//   auto x = tensor<float>({{0.2961f, 0.5166f}, {0.2517f, 0.6886f}});
//   std::cout << x;          // tensor([[0.2961, 0.5166],
//                            //         [0.2517, 0.6886]])
//   std::string s = to_string(x);
//
// The layout follows torch/_tensor_str.py: one formatter per tensor decides, from the elements that will
// be shown, between integer mode (`1.`), fixed (`0.2961`) and scientific (`1.0000e-05`) notation and a
// common width; rows wrap at `linewidth`; tensors with more than `threshold` elements are summarised to
// `edgeitems` entries at each end of every dim with `...`; float64 tensors get a `dtype=` suffix.
//
// The options are global, like torch.set_printoptions: set_printoptions / get_printoptions /
// reset_printoptions. They live in one unsynchronised static, so set them from one thread (printing
// only reads them). `to_string(t, options)` prints with explicit options and leaves the globals alone.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>
#include <version>

#include "eigenformer/tensor/tensor.hpp"

namespace eigenformer {

// torch.set_printoptions' settings (the "default" profile). sci_mode: nullopt lets each tensor choose,
// true/false forces scientific/fixed notation for floating tensors.
struct print_options {
  int precision = 4;
  std::optional<bool> sci_mode = std::nullopt;
  index_t threshold = 1000;
  index_t edgeitems = 3;
  index_t linewidth = 80;
};

namespace detail {

inline print_options& print_options_state() {
  static print_options options;
  return options;
}

// Python rejects a negative precision when it formats; a negative edgeitems makes PyTorch slice
// nonsense. Both are refused up front instead.
inline void check_print_options(const print_options& options) {
  if (options.precision < 0)
    throw std::invalid_argument("set_printoptions: precision must be >= 0, got " +
                                std::to_string(options.precision));
  if (options.edgeitems < 0)
    throw std::invalid_argument("set_printoptions: edgeitems must be >= 0, got " +
                                std::to_string(options.edgeitems));
}

}  // namespace detail

// Replaces every print option (torch.set_printoptions with all arguments given).
inline void set_printoptions(const print_options& options) {
  detail::check_print_options(options);
  detail::print_options_state() = options;
}

// Sets precision and sci_mode and keeps threshold, edgeitems and linewidth. As in PyTorch, leaving
// sci_mode out resets it to automatic.
inline void set_printoptions(int precision, std::optional<bool> sci_mode = std::nullopt) {
  print_options options = detail::print_options_state();
  options.precision = precision;
  options.sci_mode = sci_mode;
  set_printoptions(options);
}

inline print_options get_printoptions() { return detail::print_options_state(); }

// Back to the defaults (torch.set_printoptions(profile="default"), sci_mode automatic).
inline void reset_printoptions() { detail::print_options_state() = print_options{}; }

namespace detail::printing {

// Appends `v` as Python's format(v, '.{precision}f') (conv 'f') or '.{precision}e' (conv 'e') does:
// correctly rounded from the exact binary value, at least two exponent digits, `-0.0000` for negative
// zero, and `nan` / `inf` / `-inf` for non-finite values (Python never prints a sign on nan).
inline void append_number(std::string& out, double v, int precision, char conv) {
  if (std::isnan(v)) {
    out += "nan";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-inf" : "inf";
    return;
  }
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  // Locale-independent, unlike printf (whose decimal point follows LC_NUMERIC).
  const auto format = conv == 'f' ? std::chars_format::fixed : std::chars_format::scientific;
  char small[128];
  auto r = std::to_chars(small, small + sizeof small, v, format, precision);
  if (r.ec == std::errc{}) {
    out.append(small, static_cast<std::size_t>(r.ptr - small));
    return;
  }
  // Only fixed notation of huge values or a huge precision gets here: 309 integer digits at most.
  std::vector<char> big(static_cast<std::size_t>(precision) + 400);
  r = std::to_chars(big.data(), big.data() + big.size(), v, format, precision);
  if (r.ec != std::errc{}) throw std::runtime_error("eigenformer printing: number formatting failed");
  out.append(big.data(), static_cast<std::size_t>(r.ptr - big.data()));
#else
  auto print = [&](char* buf, std::size_t size) {
    return conv == 'f' ? std::snprintf(buf, size, "%.*f", precision, v)
                       : std::snprintf(buf, size, "%.*e", precision, v);
  };
  char small[128];
  const int n = print(small, sizeof small);
  if (n < 0) throw std::runtime_error("eigenformer printing: number formatting failed");
  if (static_cast<std::size_t>(n) < sizeof small) {
    out.append(small, static_cast<std::size_t>(n));
    return;
  }
  std::vector<char> big(static_cast<std::size_t>(n) + 1);
  print(big.data(), big.size());
  out.append(big.data(), static_cast<std::size_t>(n));
#endif
}

inline void append_integer(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

// Floor division, as Python's math.floor(a / b) for the b > 0 used here.
inline index_t floor_div(index_t a, index_t b) {
  index_t q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}

// A dim of size n is summarised (edge items, `...`, edge items) when it has more than 2 * edgeitems.
inline bool summarised_dim(bool summarize, index_t n, index_t edgeitems) {
  return summarize && n - edgeitems > edgeitems;
}

// The layout of the tensor being printed, with the rank as a run-time value.
template <typename T>
struct view {
  const T* data;
  const index_t* shape;
  const index_t* strides;
  std::size_t rank;
};

// Calls f(value) for every element the printout shows (PyTorch's get_summarized_data), row-major.
// PyTorch's slices self[-edgeitems:] make edgeitems == 0 show a whole summarised innermost dim; an outer
// summarised dim shows nothing then (PyTorch raises there; see tensor_writer).
template <typename T, class F>
void for_each_shown(const view<T>& v, bool summarize, index_t edgeitems, const T* p, std::size_t d, F& f) {
  if (d == v.rank) {
    f(*p);
    return;
  }
  const index_t n = v.shape[d], st = v.strides[d];
  const bool last = d + 1 == v.rank;
  auto run = [&](index_t begin, index_t end) {
    for (index_t i = begin; i < end; ++i) {
      if (last)
        f(p[i * st]);
      else
        for_each_shown(v, summarize, edgeitems, p + i * st, d + 1, f);
    }
  };
  if (summarised_dim(summarize, n, edgeitems)) {
    run(0, edgeitems);
    run(edgeitems == 0 && last ? 0 : n - edgeitems, n);
  } else {
    run(0, n);
  }
}

// PyTorch's _Formatter: chooses the notation and the common width from the shown elements.
template <typename T>
class element_formatter {
 public:
  element_formatter(const view<T>& v, bool summarize, const print_options& options)
      : precision_(options.precision) {
    if constexpr (std::is_same_v<T, bool>) {
      bool any_false = false;
      auto scan = [&](bool x) { any_false = any_false || !x; };
      for_each_shown(v, summarize, options.edgeitems, v.data, 0, scan);
      width_ = any_false ? 5 : 4;
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      std::string digits;
      auto scan = [&](std::int64_t x) {
        digits.clear();
        append_integer(digits, x);
        width_ = std::max(width_, static_cast<index_t>(digits.size()));
      };
      for_each_shown(v, summarize, options.edgeitems, v.data, 0, scan);
    } else {
      // Only nonzero finite values take part; their magnitudes are compared in double.
      bool any = false;
      double lo = 0, hi = 0;
      auto scan = [&](T x) {
        const double d = static_cast<double>(x);
        if (!std::isfinite(d) || d == 0) return;
        const double a = std::fabs(d);
        if (!any || a < lo) lo = a;
        if (!any || a > hi) hi = a;
        any = true;
        if (d != std::ceil(d)) int_mode_ = false;
      };
      for_each_shown(v, summarize, options.edgeitems, v.data, 0, scan);
      // Nothing but zeros and non-finite values: integer mode, width 1, and (as in PyTorch, which
      // returns early here) a forced sci_mode is ignored.
      if (!any) return;

      sci_mode_ = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
      const char conv = sci_mode_ ? 'e' : 'f';
      const int digits = sci_mode_ || !int_mode_ ? precision_ : 0;
      const index_t extra = !sci_mode_ && int_mode_ ? 1 : 0;  // the `.` after an integral value
      std::string text;
      auto measure = [&](T x) {
        const double d = static_cast<double>(x);
        if (!std::isfinite(d) || d == 0) return;
        text.clear();
        append_number(text, d, digits, conv);
        width_ = std::max(width_, static_cast<index_t>(text.size()) + extra);
      };
      for_each_shown(v, summarize, options.edgeitems, v.data, 0, measure);
      // The width stays the one measured for the automatic choice, as in PyTorch.
      if (options.sci_mode) sci_mode_ = *options.sci_mode;
    }
  }

  index_t width() const noexcept { return width_; }

  // Appends x right-aligned to the common width.
  void append(std::string& out, T x) const {
    const std::size_t start = out.size();
    if constexpr (std::is_same_v<T, bool>) {
      out += x ? "True" : "False";
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      append_integer(out, x);
    } else {
      const double d = static_cast<double>(x);
      if (sci_mode_) {
        append_number(out, d, precision_, 'e');
      } else if (int_mode_) {
        append_number(out, d, 0, 'f');
        if (std::isfinite(d)) out += '.';
      } else {
        append_number(out, d, precision_, 'f');
      }
    }
    const auto len = static_cast<index_t>(out.size() - start);
    if (len < width_) out.insert(start, static_cast<std::size_t>(width_ - len), ' ');
  }

 private:
  int precision_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  index_t width_ = 1;
};

// PyTorch's _tensor_str_with_formatter / _vector_str, writing straight into one string.
template <typename T>
struct tensor_writer {
  const view<T>& v;
  const print_options& options;
  bool summarize;
  const element_formatter<T>& fmt;
  std::string& out;

  void indent_spaces(index_t n) { out.append(static_cast<std::size_t>(std::max<index_t>(n, 0)), ' '); }

  void tensor(const T* p, std::size_t d, index_t indent) {
    if (d == v.rank) {  // 0-d
      fmt.append(out, *p);
      return;
    }
    if (d + 1 == v.rank) {
      vector(p, d, indent);
      return;
    }
    // Sub-tensors are separated by a comma, one newline per remaining dim, and the next indent.
    const index_t n = v.shape[d], st = v.strides[d], e = options.edgeitems;
    const std::size_t newlines = v.rank - d - 1;
    bool first = true;
    auto separate = [&] {
      if (!first) {
        out += ',';
        out.append(newlines, '\n');
        indent_spaces(indent + 1);
      }
      first = false;
    };
    auto run = [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) {
        separate();
        tensor(p + i * st, d + 1, indent + 1);
      }
    };
    out += '[';
    if (summarised_dim(summarize, n, e)) {
      // With edgeitems == 0 PyTorch raises ("stack expects a non-empty TensorList"); this prints `[...]`.
      run(0, e);
      separate();
      out += "...";
      run(n - e, n);
    } else {
      run(0, n);
    }
    out += ']';
  }

  void vector(const T* p, std::size_t d, index_t indent) {
    const index_t n = v.shape[d], st = v.strides[d], e = options.edgeitems;
    const index_t element_length = fmt.width() + 2;  // the element, a comma and a space
    const index_t per_line = std::max<index_t>(1, floor_div(options.linewidth - indent, element_length));
    index_t k = 0;  // elements written so far; the `...` counts as one
    auto next = [&] {
      if (k > 0) {
        if (k % per_line == 0) {
          out += ",\n";
          indent_spaces(indent + 1);
        } else {
          out += ", ";
        }
      }
      ++k;
    };
    auto run = [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) {
        next();
        fmt.append(out, p[i * st]);
      }
    };
    out += '[';
    if (summarised_dim(summarize, n, e)) {
      run(0, e);
      next();
      out += " ...";
      run(e == 0 ? 0 : n - e, n);  // self[-0:] is the whole dim in Python
    } else {
      run(0, n);
    }
    out += ']';
  }
};

template <typename T>
constexpr std::string_view dtype_name() {
  if constexpr (std::is_same_v<T, float>)
    return "torch.float32";
  else if constexpr (std::is_same_v<T, double>)
    return "torch.float64";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "torch.int64";
  else
    return "torch.bool";
}

// Python's str(tuple(shape)): `(2, 0)`, `(5,)`, `()`.
template <std::size_t R>
std::string shape_tuple(const Shape<R>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < R; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if constexpr (R == 1) s += ',';
  return s + ')';
}

// PyTorch's _add_suffixes: each suffix goes on the current line if it fits in linewidth, else on a new
// line indented like the first element.
inline void add_suffixes(std::string& out, const std::vector<std::string>& suffixes, index_t indent,
                         index_t linewidth) {
  const std::size_t nl = out.rfind('\n');
  index_t last_line_len = static_cast<index_t>(out.size()) -
                          (nl == std::string::npos ? index_t{-1} : static_cast<index_t>(nl)) + 1;
  for (const auto& suffix : suffixes) {
    const auto len = static_cast<index_t>(suffix.size());
    if (last_line_len + len + 2 > linewidth) {
      out += ",\n";
      out.append(static_cast<std::size_t>(indent), ' ');
      last_line_len = indent + len;
    } else {
      out += ", ";
      last_line_len += len + 2;
    }
    out += suffix;
  }
  out += ')';
}

}  // namespace detail::printing

// repr(t) under the given options, e.g. `tensor([1., 2.], dtype=torch.float64)`.
template <typename T, std::size_t R>
std::string to_string(const Tensor<T, R>& t, const print_options& options) {
  namespace p = detail::printing;
  detail::check_print_options(options);
  constexpr index_t indent = 7;  // len("tensor(")
  std::string out = "tensor(";
  std::vector<std::string> suffixes;
  if (t.numel() == 0) {
    // No elements to tell int64 from float32 by, so every dtype but the default one is named.
    out += "[]";
    if (R != 1) suffixes.push_back("size=" + p::shape_tuple(t.shape()));
    if (!std::is_same_v<T, float>) suffixes.push_back("dtype=" + std::string(p::dtype_name<T>()));
  } else {
    if (std::is_same_v<T, double>) suffixes.push_back("dtype=" + std::string(p::dtype_name<T>()));
    const p::view<T> v{t.data(), t.shape().data(), t.strides().data(), R};
    const bool summarize = t.numel() > options.threshold;
    const p::element_formatter<T> fmt(v, summarize, options);
    p::tensor_writer<T>{v, options, summarize, fmt, out}.tensor(t.data(), 0, indent);
  }
  p::add_suffixes(out, suffixes, indent, options.linewidth);
  return out;
}

// repr(t) under the global print options.
template <typename T, std::size_t R>
std::string to_string(const Tensor<T, R>& t) {
  return to_string(t, get_printoptions());
}

template <typename T, std::size_t R>
std::ostream& operator<<(std::ostream& os, const Tensor<T, R>& t) {
  return os << to_string(t);
}

}  // namespace eigenformer
