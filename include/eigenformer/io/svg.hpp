// Pictures as SVG files, written without any dependency: heatmaps (a matrix with row and column labels, a
// colour bar and a title: attention weights with the tokens on both axes, position-encoding tables,
// confusion matrices with their counts) and line charts (several series on shared axes with ticks and a
// legend: loss and accuracy curves). A Figure lays out any number of them in a grid and writes one file;
// add_attention adds a model's attention weights to one, a row of heads per layer.
//
//   namespace svg = eigenformer::io::svg;
//   svg::Figure fig("Attention");
//   fig.add(svg::heatmap(weights, {.title = "layer 0, head 3", .row_labels = tokens, .col_labels = tokens}));
//   fig.add(svg::LineChart{.title = "loss", .x_label = "step", .series = {{"train", steps, losses}}});
//   fig.save("attention.svg");
//
// Text (titles, labels, legend entries) is written as XML character data: '<', '&', quotes are escaped,
// UTF-8 is kept as is, and bytes that are not UTF-8 or characters XML forbids (control characters) become
// U+FFFD, so every file is well-formed whatever the tokens are. Files are written atomically (the old file
// stays until the new one is complete). Bad input throws svg::plot_error naming the picture and the problem:
// an empty matrix, a label count that does not match, a NaN or infinite value, series of unequal lengths.
//
// Every heatmap cell is one <rect class="cell"> with a <title> (the browser shows "row / column: value" when
// the pointer rests on it); series are <polyline class="series">; panels are <g class="panel">.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "eigenformer/io/detail/atomic_file.hpp"
#include "eigenformer/tensor/tensor.hpp"

namespace eigenformer::io::svg {

// Input a picture cannot be drawn from. The message names the picture (its title) and what is wrong.
class plot_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// How heatmap values map to colours. viridis: dark blue (low) to yellow (high), for weights and other
// non-negative values; blues: white to dark blue, for counts; diverging: blue (low), white (middle), red
// (high), for values around zero such as the sinusoidal encoding's -1..1.
enum class Colormap { viridis, blues, diverging };

struct HeatmapOptions {
  std::string title{};
  std::vector<std::string> row_labels{};  // empty: row indices as ticks; else one per row
  std::vector<std::string> col_labels{};  // empty: column indices as ticks; else one per column
  std::string x_label{}, y_label{};     // axis captions (under the grid, left of it)
  Colormap colormap = Colormap::viridis;
  std::optional<double> vmin{}, vmax{}; // the colour scale's ends (default: the data's minimum and maximum)
  bool annotate = false;                // write each value in its cell
  int decimals = 2;                     // for annotate and the cell tooltips; -1: integers
  double cell_size = 0;                 // pixels per cell; 0: chosen from the matrix size
  bool colorbar = true;
  bool tooltips = true;                 // a <title> per cell (row / column: value); off keeps big maps small
};

// A matrix to draw: values row-major, rows x cols.
struct Heatmap {
  std::size_t rows = 0, cols = 0;
  std::vector<double> values{};
  HeatmapOptions options{};
};

// One curve: y[i] at x[i] (x need not be sorted or evenly spaced, but is drawn in the given order).
struct Series {
  std::string name{};
  std::vector<double> x{}, y{};
  std::string color{};  // empty: the next colour of the chart's palette
  bool markers = false; // a dot at every point (always drawn for series of at most 40 points)

  // Takes the points of `from` (a curve read from a log), keeping this series' name and style.
  void set_points(Series from) {
    x = std::move(from.x);
    y = std::move(from.y);
  }
};

struct LineChart {
  std::string title{}, x_label{}, y_label{};
  std::vector<Series> series{};
  std::optional<double> ymin{}, ymax{};  // default: the data's range, widened to round ticks
  double width = 520, height = 300;  // the plot area in pixels
};

namespace detail {

inline std::string title_or(const std::string& title, const char* what) {
  return title.empty() ? std::string(what) : std::string(what) + " \"" + title + "\"";
}

// Appends `s` as XML character data (also valid inside a double-quoted attribute): markup characters as
// entities, valid UTF-8 as is, anything else (bad bytes, C0 controls but tab and newline, U+FFFE/U+FFFF)
// as U+FFFD.
inline void append_escaped(std::string& out, std::string_view s) {
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '&': out += "&amp;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        case '\t': case '\n': out += "&#" + std::to_string(c) + ";"; break;  // kept, not folded by attribute parsing
        default:
          if (c < 0x20 || c == 0x7F) out += replacement;
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A multi-byte sequence: its length from the lead byte, then continuation bytes, no overlong forms,
    // no surrogates, nothing above U+10FFFF.
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1Fu;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0Fu;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07u;
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xC0u) != 0x80u) ok = false;
      else cp = (cp << 6) | (p[i + k] & 0x3Fu);
    }
    if (ok) {
      const std::uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
      ok = cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF) && cp != 0xFFFE && cp != 0xFFFF;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += replacement;
      ++i;  // resynchronise on the next byte
    }
  }
}

inline std::string escaped(std::string_view s) {
  std::string out;
  append_escaped(out, s);
  return out;
}

// Characters (UTF-8 code points) in s, for estimating how wide a text is.
inline std::size_t text_length(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0u) != 0x80u;
  return n;
}

// An estimate of the width of `s` in a sans-serif font of `size` pixels (average glyph ~0.6 em).
inline double text_width(std::string_view s, double size) { return 0.6 * size * static_cast<double>(text_length(s)); }

// Numbers in attributes: fixed, at most 2 decimals, no trailing zeros.
inline std::string num(double v) {
  if (std::abs(v) < 0.005) v = 0;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// A value as people read it: `decimals` < 0 rounds to an integer, else %.{decimals}f, in a tooltip or cell.
inline std::string value_text(double v, int decimals) {
  char buf[64];
  if (decimals < 0) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 12), v);
  return buf;
}

// Tick labels: fixed notation with as many decimals as the step needs (20, 0.25, 1e-3 as 0.001), %g for
// very large or very small magnitudes.
inline std::string tick_text(double v, double step) {
  if (std::abs(v) < step * 1e-9) v = 0;
  char buf[64];
  const double mag = std::max(std::abs(v), std::abs(step));
  if (step > 0 && mag < 1e7 && step >= 1e-6) {
    int decimals = 0;
    while (decimals < 8 && std::abs(step * std::pow(10.0, decimals) - std::round(step * std::pow(10.0, decimals))) > 1e-6)
      ++decimals;
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

// "Nice" ticks covering [lo, hi]: steps of 1, 2 or 5 times a power of ten, about `target` of them.
struct Ticks {
  double lo, hi, step;
  std::vector<double> values;
};
inline Ticks nice_ticks(double lo, double hi, int target = 6, bool widen = true) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / std::max(target, 1);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
  Ticks t{lo, hi, step, {}};
  if (widen) {
    t.lo = std::floor(lo / step + 1e-9) * step;
    t.hi = std::ceil(hi / step - 1e-9) * step;
  }
  for (double v = std::ceil(t.lo / step - 1e-9) * step; v <= t.hi + step * 1e-9; v += step) t.values.push_back(v);
  return t;
}

struct Rgb {
  double r, g, b;
};

inline Rgb mix(Rgb a, Rgb b, double t) { return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t}; }

inline Rgb hex(unsigned v) { return {double(v >> 16 & 0xFF), double(v >> 8 & 0xFF), double(v & 0xFF)}; }

// t in [0, 1] -> a colour of the map, by linear interpolation between a few anchor colours.
inline Rgb colormap(Colormap m, double t) {
  static const Rgb viridis[] = {hex(0x440154), hex(0x482878), hex(0x3E4989), hex(0x31688E), hex(0x26828E),
                                hex(0x1F9E89), hex(0x35B779), hex(0x6ECE58), hex(0xB5DE2B), hex(0xFDE725)};
  static const Rgb blues[] = {hex(0xF7FBFF), hex(0xC6DBEF), hex(0x6BAED6), hex(0x2171B5), hex(0x08306B)};
  static const Rgb diverging[] = {hex(0x2166AC), hex(0x92C5DE), hex(0xF7F7F7), hex(0xF4A582), hex(0xB2182B)};
  const Rgb* stops = viridis;
  std::size_t n = std::size(viridis);
  if (m == Colormap::blues) stops = blues, n = std::size(blues);
  if (m == Colormap::diverging) stops = diverging, n = std::size(diverging);
  t = std::clamp(std::isnan(t) ? 0.0 : t, 0.0, 1.0) * static_cast<double>(n - 1);
  const auto k = std::min(static_cast<std::size_t>(t), n - 2);
  return mix(stops[k], stops[k + 1], t - static_cast<double>(k));
}

inline std::string css(Rgb c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<unsigned>(std::lround(c.r)),
                static_cast<unsigned>(std::lround(c.g)), static_cast<unsigned>(std::lround(c.b)));
  return buf;
}

// Black text on light colours, white on dark ones.
inline const char* text_on(Rgb c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b > 140 ? "#000" : "#fff"; }

inline const char* palette(std::size_t i) {
  static const char* const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                       "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return colors[i % std::size(colors)];
}

// One panel rendered at the origin: its SVG elements and its size.
struct Rendered {
  std::string body;
  double width = 0, height = 0;
};

inline void text(std::string& out, double x, double y, std::string_view s, double size, const char* anchor = "start",
                 std::string_view extra = {}) {
  out += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\"";
  if (std::string_view(anchor) != "start") out += std::string(" text-anchor=\"") + anchor + "\"";
  if (!extra.empty()) out += " " + std::string(extra);
  out += ">";
  append_escaped(out, s);
  out += "</text>\n";
}

inline void check_heatmap(const Heatmap& h) {
  const auto& o = h.options;
  const std::string what = title_or(o.title, "heatmap");
  if (h.rows == 0 || h.cols == 0)
    throw plot_error(what + ": the matrix is empty (" + std::to_string(h.rows) + " x " + std::to_string(h.cols) + ")");
  if (h.values.size() != h.rows * h.cols)
    throw plot_error(what + ": " + std::to_string(h.values.size()) + " values for a " + std::to_string(h.rows) + " x " +
                     std::to_string(h.cols) + " matrix");
  if (!o.row_labels.empty() && o.row_labels.size() != h.rows)
    throw plot_error(what + ": " + std::to_string(o.row_labels.size()) + " row labels for " + std::to_string(h.rows) + " rows");
  if (!o.col_labels.empty() && o.col_labels.size() != h.cols)
    throw plot_error(what + ": " + std::to_string(o.col_labels.size()) + " column labels for " + std::to_string(h.cols) +
                     " columns");
  for (std::size_t i = 0; i < h.values.size(); ++i)
    if (!std::isfinite(h.values[i]))
      throw plot_error(what + ": value at row " + std::to_string(i / h.cols) + ", column " + std::to_string(i % h.cols) +
                       " is " + (std::isnan(h.values[i]) ? "NaN" : "infinite") + "; only finite values can be coloured");
  if ((o.vmin && !std::isfinite(*o.vmin)) || (o.vmax && !std::isfinite(*o.vmax)))
    throw plot_error(what + ": vmin and vmax must be finite");
  if (o.vmin && o.vmax && !(*o.vmin < *o.vmax)) throw plot_error(what + ": vmin must be less than vmax");
}

inline Rendered render(const Heatmap& h, int id) {
  check_heatmap(h);
  const auto& o = h.options;
  const double rows = static_cast<double>(h.rows), cols = static_cast<double>(h.cols);
  const double cell = o.cell_size > 0 ? o.cell_size : std::clamp(420.0 / std::max(rows, cols), 1.0, 40.0);
  const double gw = cell * cols, gh = cell * rows;
  const double label_size = std::clamp(cell * 0.7, 7.0, 12.0);
  // Labels are drawn every `step` cells so that they do not overlap (all of them when the cells are big enough).
  // Index ticks (no labels given) go in steps of 1, 2, 5, 10, 20, 50, ...
  const auto label_step = [&](bool indices) {
    const auto need = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(label_size * 1.15 / cell)));
    if (!indices) return need;
    for (std::size_t p = 1;; p *= 10)
      for (const std::size_t m : {1, 2, 5})
        if (m * p >= need) return m * p;
  };
  const std::size_t row_step = label_step(o.row_labels.empty()), col_step = label_step(o.col_labels.empty());

  double lo = o.vmin.value_or(*std::min_element(h.values.begin(), h.values.end()));
  double hi = o.vmax.value_or(*std::max_element(h.values.begin(), h.values.end()));
  if (!(hi > lo)) {  // a constant matrix: centre it on the scale
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.5;
    if (!o.vmin) lo -= pad;
    if (!o.vmax) hi += pad;
  }

  // Margins: the row labels on the left, the column labels (rotated) on top, the title above them.
  double left = 8, top = 8;
  std::vector<std::string> row_text(h.rows), col_text(h.cols);
  for (std::size_t r = 0; r < h.rows; r += row_step) row_text[r] = o.row_labels.empty() ? std::to_string(r) : o.row_labels[r];
  for (std::size_t c = 0; c < h.cols; c += col_step) col_text[c] = o.col_labels.empty() ? std::to_string(c) : o.col_labels[c];
  double row_w = 0, col_w = 0;
  for (const auto& s : row_text) row_w = std::max(row_w, text_width(s, label_size));
  for (const auto& s : col_text) col_w = std::max(col_w, text_width(s, label_size));
  const bool rotate = col_w > cell * col_step * 0.9;  // column labels that do not fit across go up at 60 degrees
  const double col_h = rotate ? col_w * 0.87 + label_size : label_size + 4;
  if (!o.y_label.empty()) left += label_size + 8;
  left += row_w + 6;
  const double title_size = 14;
  if (!o.title.empty()) top += title_size + 8;
  top += col_h + 4;
  double right = 12;
  const double bar_w = 12, bar_gap = 14;
  Ticks bar_ticks = nice_ticks(lo, hi, 5, false);
  if (o.colorbar) {
    double tick_w = 0;
    for (const double v : bar_ticks.values) tick_w = std::max(tick_w, text_width(tick_text(v, bar_ticks.step), 10));
    right += bar_gap + bar_w + 6 + tick_w;
  }
  double bottom = 8;
  if (!o.x_label.empty()) bottom += label_size + 10;

  Rendered out;
  out.width = left + gw + right;
  out.height = top + gh + bottom;
  out.width = std::max(out.width, text_width(o.title, title_size) + 16);
  std::string& s = out.body;
  if (!o.title.empty()) text(s, out.width / 2, 8 + title_size, o.title, title_size, "middle", "font-weight=\"bold\"");

  // Cells.
  s += "<g class=\"cells\" transform=\"translate(" + num(left) + "," + num(top) + ")\">\n";
  for (std::size_t r = 0; r < h.rows; ++r)
    for (std::size_t c = 0; c < h.cols; ++c) {
      const double v = h.values[r * h.cols + c];
      const Rgb color = colormap(o.colormap, (v - lo) / (hi - lo));
      // Cells overlap by a hair so that no background seams show between them at fractional zoom.
      s += "<rect class=\"cell\" x=\"" + num(cell * static_cast<double>(c)) + "\" y=\"" + num(cell * static_cast<double>(r)) +
           "\" width=\"" + num(cell + (cell >= 4 ? 0 : 0.3)) + "\" height=\"" + num(cell + (cell >= 4 ? 0 : 0.3)) +
           "\" fill=\"" + css(color) + "\"";
      if (!o.tooltips) {
        s += "/>\n";
        continue;
      }
      s += "><title>";
      append_escaped(s, o.row_labels.empty() ? std::to_string(r) : o.row_labels[r]);
      s += " / ";
      append_escaped(s, o.col_labels.empty() ? std::to_string(c) : o.col_labels[c]);
      s += ": " + value_text(v, o.decimals) + "</title></rect>\n";
    }
  if (o.annotate) {
    const double size = std::clamp(cell * 0.3, 6.0, 14.0);
    for (std::size_t r = 0; r < h.rows; ++r)
      for (std::size_t c = 0; c < h.cols; ++c) {
        const double v = h.values[r * h.cols + c];
        // Built with += on a named string: GCC 12 warns (-Warray-bounds, falsely) about the chained operator+.
        std::string attrs = "class=\"value\" fill=\"";
        attrs += text_on(colormap(o.colormap, (v - lo) / (hi - lo)));
        attrs += '"';
        text(s, cell * (static_cast<double>(c) + 0.5), cell * (static_cast<double>(r) + 0.5) + size * 0.35,
             value_text(v, o.decimals), size, "middle", attrs);
      }
  }
  s += "<rect x=\"0\" y=\"0\" width=\"" + num(gw) + "\" height=\"" + num(gh) +
       "\" fill=\"none\" stroke=\"#444\" stroke-width=\"0.5\"/>\n</g>\n";

  // Row labels, right-aligned against the grid; column labels above it.
  for (std::size_t r = 0; r < h.rows; r += row_step)
    text(s, left - 4, top + cell * (static_cast<double>(r) + 0.5) + label_size * 0.35, row_text[r], label_size, "end",
         "class=\"row-label\"");
  for (std::size_t c = 0; c < h.cols; c += col_step) {
    const double x = left + cell * (static_cast<double>(c) + 0.5), y = top - 4;
    if (rotate)
      text(s, x, y, col_text[c], label_size, "start",
           "class=\"col-label\" transform=\"rotate(-60 " + num(x) + " " + num(y) + ")\"");
    else
      text(s, x, y, col_text[c], label_size, "middle", "class=\"col-label\"");
  }
  if (!o.y_label.empty()) {
    const double x = 8 + label_size, y = top + gh / 2;
    text(s, x, y, o.y_label, label_size, "middle", "transform=\"rotate(-90 " + num(x) + " " + num(y) + ")\"");
  }
  if (!o.x_label.empty()) text(s, left + gw / 2, top + gh + label_size + 8, o.x_label, label_size, "middle");

  // Colour bar: a vertical gradient from hi (top) to lo, with ticks.
  if (o.colorbar) {
    const std::string grad = "colorbar" + std::to_string(id);
    const double bx = left + gw + bar_gap, bh = gh;
    s += "<defs><linearGradient id=\"" + grad + "\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
    for (int k = 0; k <= 10; ++k)
      s += "<stop offset=\"" + num(k / 10.0) + "\" stop-color=\"" + css(colormap(o.colormap, k / 10.0)) + "\"/>";
    s += "</linearGradient></defs>\n";
    s += "<rect class=\"colorbar\" x=\"" + num(bx) + "\" y=\"" + num(top) + "\" width=\"" + num(bar_w) + "\" height=\"" +
         num(bh) + "\" fill=\"url(#" + grad + ")\" stroke=\"#444\" stroke-width=\"0.5\"/>\n";
    for (const double v : bar_ticks.values) {
      const double y = top + bh * (1 - (v - lo) / (hi - lo));
      s += "<line x1=\"" + num(bx + bar_w) + "\" y1=\"" + num(y) + "\" x2=\"" + num(bx + bar_w + 3) + "\" y2=\"" + num(y) +
           "\" stroke=\"#444\"/>\n";
      text(s, bx + bar_w + 5, y + 3.5, tick_text(v, bar_ticks.step), 10);
    }
  }
  return out;
}

inline void check_chart(const LineChart& c) {
  const std::string what = title_or(c.title, "line chart");
  if (c.series.empty()) throw plot_error(what + ": no series to draw");
  if (!(c.width > 0 && c.height > 0)) throw plot_error(what + ": width and height must be positive");
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const auto& s = c.series[k];
    const std::string name = "series " + (s.name.empty() ? std::to_string(k) : "\"" + s.name + "\"");
    if (s.x.size() != s.y.size())
      throw plot_error(what + ": " + name + " has " + std::to_string(s.x.size()) + " x values but " + std::to_string(s.y.size()) +
                       " y values");
    if (s.x.empty()) throw plot_error(what + ": " + name + " has no points");
    for (std::size_t i = 0; i < s.x.size(); ++i)
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]))
        throw plot_error(what + ": " + name + ", point " + std::to_string(i) + ": " +
                         (std::isnan(s.x[i]) || std::isnan(s.y[i]) ? "NaN" : "an infinite value") +
                         " (only finite values can be drawn; leave missing points out)");
  }
  if ((c.ymin && !std::isfinite(*c.ymin)) || (c.ymax && !std::isfinite(*c.ymax)))
    throw plot_error(what + ": ymin and ymax must be finite");
  if (c.ymin && c.ymax && !(*c.ymin < *c.ymax)) throw plot_error(what + ": ymin must be less than ymax");
}

inline Rendered render(const LineChart& c, int id) {
  check_chart(c);
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const auto& s : c.series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      x_lo = std::min(x_lo, s.x[i]), x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]), y_hi = std::max(y_hi, s.y[i]);
    }
  if (c.ymin) y_lo = *c.ymin;
  if (c.ymax) y_hi = *c.ymax;
  const Ticks xt = nice_ticks(x_lo, x_hi, 7, false);
  Ticks yt = nice_ticks(y_lo, y_hi, 6, !c.ymin && !c.ymax);
  if (c.ymin) yt.lo = *c.ymin;
  if (c.ymax) yt.hi = *c.ymax;
  const double xmin = xt.lo, xmax = xt.hi, ymin = yt.lo, ymax = yt.hi;
  const double font = 11, title_size = 14;

  double tick_w = 0;
  for (const double v : yt.values) tick_w = std::max(tick_w, text_width(tick_text(v, yt.step), font));
  double legend_w = 0;
  for (const auto& s : c.series) legend_w = std::max(legend_w, text_width(s.name, font));
  const bool legend = c.series.size() > 1 || !c.series[0].name.empty();
  const double left = 10 + (c.y_label.empty() ? 0 : font + 8) + tick_w + 8;
  const double top = 10 + (c.title.empty() ? 0 : title_size + 10);
  const double right = legend ? 16 + 24 + legend_w + 12 : 16;
  const double bottom = 8 + font + 8 + (c.x_label.empty() ? 0 : font + 10);
  const double w = c.width, h = c.height;
  const auto px = [&](double x) { return left + (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5) * w; };
  const auto py = [&](double y) { return top + (1 - (y - ymin) / (ymax - ymin)) * h; };

  Rendered out;
  out.width = std::max(left + w + right, text_width(c.title, title_size) + 16);
  out.height = top + h + bottom;
  std::string& s = out.body;
  if (!c.title.empty()) text(s, out.width / 2, 10 + title_size, c.title, title_size, "middle", "font-weight=\"bold\"");
  s += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
       "\" fill=\"#fff\" stroke=\"#444\" stroke-width=\"0.8\"/>\n";
  // Grid lines and tick labels.
  for (const double v : yt.values) {
    if (v < ymin - 1e-9 * yt.step || v > ymax + 1e-9 * yt.step) continue;
    const double y = py(v);
    s += "<line class=\"grid\" x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + w) + "\" y2=\"" + num(y) +
         "\" stroke=\"#ddd\" stroke-width=\"0.8\"/>\n";
    text(s, left - 5, y + font * 0.35, tick_text(v, yt.step), font, "end", "class=\"tick\"");
  }
  for (const double v : xt.values) {
    if (v < xmin - 1e-9 * xt.step || v > xmax + 1e-9 * xt.step) continue;
    const double x = px(v);
    s += "<line class=\"grid\" x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(top + h) +
         "\" stroke=\"#ddd\" stroke-width=\"0.8\"/>\n";
    text(s, x, top + h + font + 6, tick_text(v, xt.step), font, "middle", "class=\"tick\"");
  }
  if (!c.x_label.empty()) text(s, left + w / 2, top + h + 2 * font + 16, c.x_label, font, "middle");
  if (!c.y_label.empty()) {
    const double x = 10 + font, y = top + h / 2;
    text(s, x, y, c.y_label, font, "middle", "transform=\"rotate(-90 " + num(x) + " " + num(y) + ")\"");
  }
  // The curves, clipped to the plot area (a fixed ymin/ymax may cut them), widened by a marker's radius so
  // that the dots on the frame stay round.
  const std::string clip = "plotarea" + std::to_string(id);
  s += "<clipPath id=\"" + clip + "\"><rect x=\"" + num(left - 3) + "\" y=\"" + num(top - 3) + "\" width=\"" + num(w + 6) +
       "\" height=\"" + num(h + 6) + "\"/></clipPath>\n<g clip-path=\"url(#" + clip + ")\">\n";
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const auto& ser = c.series[k];
    const std::string color = ser.color.empty() ? palette(k) : escaped(ser.color);
    s += "<polyline class=\"series\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.6\" stroke-linejoin=\"round\" points=\"";
    for (std::size_t i = 0; i < ser.x.size(); ++i) {
      if (i > 0) s += ' ';
      s += num(px(ser.x[i]));
      s += ',';
      s += num(py(ser.y[i]));
    }
    s += "\"><title>";
    append_escaped(s, ser.name);
    s += "</title></polyline>\n";
    if (ser.markers || ser.x.size() <= 40)
      for (std::size_t i = 0; i < ser.x.size(); ++i)
        s += "<circle class=\"marker\" cx=\"" + num(px(ser.x[i])) + "\" cy=\"" + num(py(ser.y[i])) + "\" r=\"2.5\" fill=\"" +
             color + "\"/>\n";
  }
  s += "</g>\n";
  if (legend) {
    const double lx = left + w + 16;
    for (std::size_t k = 0; k < c.series.size(); ++k) {
      const double y = top + 8 + static_cast<double>(k) * (font + 8);
      const std::string color = c.series[k].color.empty() ? palette(k) : escaped(c.series[k].color);
      s += "<line x1=\"" + num(lx) + "\" y1=\"" + num(y) + "\" x2=\"" + num(lx + 18) + "\" y2=\"" + num(y) + "\" stroke=\"" +
           color + "\" stroke-width=\"2.5\"/>\n";
      text(s, lx + 24, y + font * 0.35, c.series[k].name, font, "start", "class=\"legend\"");
    }
  }
  return out;
}

}  // namespace detail

// A heatmap of a 2-D tensor (any element type convertible to double), row i of the tensor drawn as row i.
template <class T>
Heatmap heatmap(const Tensor<T, 2>& t, HeatmapOptions options = {}) {
  Heatmap h;
  h.rows = static_cast<std::size_t>(t.shape()[0]);
  h.cols = static_cast<std::size_t>(t.shape()[1]);
  h.values.reserve(h.rows * h.cols);
  for (index_t r = 0; r < t.shape()[0]; ++r)
    for (index_t c = 0; c < t.shape()[1]; ++c) h.values.push_back(static_cast<double>(t(r, c)));
  h.options = std::move(options);
  return h;
}

// A heatmap of a matrix given as rows (all of one length; ragged rows throw).
template <class T>
Heatmap heatmap(const std::vector<std::vector<T>>& rows, HeatmapOptions options = {}) {
  Heatmap h;
  h.rows = rows.size();
  h.cols = rows.empty() ? 0 : rows[0].size();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].size() != h.cols)
      throw plot_error(detail::title_or(options.title, "heatmap") + ": row " + std::to_string(r) + " has " +
                       std::to_string(rows[r].size()) + " values but row 0 has " + std::to_string(h.cols));
    for (const auto& v : rows[r]) h.values.push_back(static_cast<double>(v));
  }
  h.options = std::move(options);
  return h;
}

// A confusion matrix: counts[true class][predicted class], with the class names on both axes, the count
// written in every cell and white-to-blue colours. The matrix must be square with one name per class and
// no negative counts.
inline Heatmap confusion_matrix(const std::vector<std::vector<std::int64_t>>& counts, const std::vector<std::string>& names,
                                std::string title = "Confusion matrix") {
  const std::string what = detail::title_or(title, "confusion matrix");
  if (counts.empty()) throw plot_error(what + ": no classes (the matrix is empty)");
  if (names.size() != counts.size())
    throw plot_error(what + ": " + std::to_string(names.size()) + " class names for " + std::to_string(counts.size()) +
                     " classes");
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r].size() != counts.size())
      throw plot_error(what + ": row " + std::to_string(r) + " has " + std::to_string(counts[r].size()) +
                       " counts; a confusion matrix is square (" + std::to_string(counts.size()) + " classes)");
    for (const auto v : counts[r])
      if (v < 0) throw plot_error(what + ": negative count " + std::to_string(v) + " in row " + std::to_string(r));
  }
  HeatmapOptions o;
  o.title = std::move(title);
  o.row_labels = names;
  o.col_labels = names;
  o.y_label = "true class";
  o.x_label = "predicted class";
  o.colormap = Colormap::blues;
  o.annotate = true;
  o.decimals = -1;
  o.vmin = 0;
  o.cell_size = std::clamp(360.0 / static_cast<double>(counts.size()), 24.0, 90.0);
  auto h = heatmap(counts, std::move(o));
  if (*std::max_element(h.values.begin(), h.values.end()) == 0) h.options.vmax = 1;  // all zero: a 0..1 scale
  return h;
}

// A CSV log as the training examples write it (--log FILE.csv), for drawing its curves: a header row naming
// the columns, then rows of comma-separated fields without quoting; an empty field is a missing value. A
// last line without its newline (a log still being written) is left out.
class CsvLog {
 public:
  static CsvLog read(const std::filesystem::path& path) {
    std::FILE* f = std::fopen(path.string().c_str(), "rb");
    if (!f) throw plot_error(path.string() + ": cannot open the CSV log");
    std::string text;
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    const bool bad = std::ferror(f) != 0;
    std::fclose(f);
    if (bad) throw plot_error(path.string() + ": read error");
    return parse(text, path.string());
  }

  // `source` names the text in error messages.
  static CsvLog parse(std::string_view text, std::string source = "CSV log") {
    CsvLog log;
    log.source_ = std::move(source);
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) break;  // an unfinished last line
      std::string_view line = text.substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      std::vector<std::string> fields;
      for (std::size_t b = 0;;) {
        const std::size_t c = line.find(',', b);
        fields.emplace_back(line.substr(b, c == std::string_view::npos ? std::string_view::npos : c - b));
        if (c == std::string_view::npos) break;
        b = c + 1;
      }
      if (line_no == 1) {
        log.header_ = std::move(fields);
        continue;
      }
      if (line.empty()) continue;
      if (fields.size() != log.header_.size())
        throw plot_error(log.source_ + ": line " + std::to_string(line_no) + " has " + std::to_string(fields.size()) +
                         " fields but the header names " + std::to_string(log.header_.size()) + " columns");
      log.rows_.push_back({line_no, std::move(fields)});
    }
    if (log.header_.empty()) throw plot_error(log.source_ + ": empty (no header row)");
    return log;
  }

  const std::vector<std::string>& header() const noexcept { return header_; }
  std::size_t rows() const noexcept { return rows_.size(); }
  bool has_column(std::string_view name) const { return std::find(header_.begin(), header_.end(), name) != header_.end(); }

  // The points (x, y) of the rows whose column `where` holds `value` (every row when `where` is empty), in
  // file order; rows where x or y is empty are skipped. A missing column, or a field that is not a finite
  // number, throws naming the file, the line and the column.
  Series series(std::string name, std::string_view x, std::string_view y, std::string_view where = {},
                std::string_view value = {}) const {
    const std::size_t xi = column(x), yi = column(y), wi = where.empty() ? 0 : column(where);
    Series s;
    s.name = std::move(name);
    for (const auto& row : rows_) {
      if (!where.empty() && row.fields[wi] != value) continue;
      if (row.fields[xi].empty() || row.fields[yi].empty()) continue;
      s.x.push_back(number(row, xi));
      s.y.push_back(number(row, yi));
    }
    return s;
  }

 private:
  struct Row {
    std::size_t line;
    std::vector<std::string> fields;
  };

  std::size_t column(std::string_view name) const {
    const auto it = std::find(header_.begin(), header_.end(), name);
    if (it == header_.end()) {
      std::string names;
      for (const auto& h : header_) names += (names.empty() ? "" : ", ") + h;
      throw plot_error(source_ + ": no column \"" + std::string(name) + "\" (the header has " + names + ")");
    }
    return static_cast<std::size_t>(it - header_.begin());
  }
  double number(const Row& row, std::size_t i) const {
    const std::string& f = row.fields[i];
    char* end = nullptr;
    const double v = std::strtod(f.c_str(), &end);
    if (end != f.c_str() + f.size() || !std::isfinite(v))
      throw plot_error(source_ + ": line " + std::to_string(row.line) + ", column \"" + header_[i] + "\": \"" + f +
                       "\" is not a finite number");
    return v;
  }

  std::string source_;
  std::vector<std::string> header_;
  std::vector<Row> rows_;
};

// Pictures laid out in a grid, `columns` to a row, under an optional title; written as one SVG document.
class Figure {
 public:
  explicit Figure(std::string title = "", std::size_t columns = 1) : title_(std::move(title)), columns_(columns) {
    if (columns_ == 0) throw plot_error("figure: columns must be at least 1");
  }

  Figure& add(Heatmap h) {
    detail::check_heatmap(h);
    panels_.emplace_back(std::move(h));
    return *this;
  }
  Figure& add(LineChart c) {
    detail::check_chart(c);
    panels_.emplace_back(std::move(c));
    return *this;
  }
  // Starts a new row of the grid (the next panel goes to the first column).
  Figure& new_row() {
    if (!panels_.empty()) breaks_.push_back(panels_.size());
    return *this;
  }

  std::size_t size() const noexcept { return panels_.size(); }
  const std::string& title() const noexcept { return title_; }

  // The whole document, starting with the XML declaration.
  std::string str() const {
    if (panels_.empty()) throw plot_error(detail::title_or(title_, "figure") + ": nothing to draw (no panels added)");
    std::vector<detail::Rendered> parts;
    parts.reserve(panels_.size());
    for (std::size_t i = 0; i < panels_.size(); ++i)
      parts.push_back(std::visit(
          [&](const auto& p) {
            return detail::render(p, static_cast<int>(i));
          },
          panels_[i]));
    // Grid positions: row-major with `columns_` per row, a new row at every break.
    std::vector<std::size_t> row(panels_.size()), col(panels_.size());
    std::size_t r = 0, c = 0, b = 0;
    for (std::size_t i = 0; i < panels_.size(); ++i) {
      if ((b < breaks_.size() && breaks_[b] == i) || c == columns_) {
        if (c > 0) ++r;
        c = 0;
        while (b < breaks_.size() && breaks_[b] <= i) ++b;
      }
      row[i] = r, col[i] = c++;
    }
    std::vector<double> col_w(columns_, 0), row_h(r + 1, 0);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      col_w[col[i]] = std::max(col_w[col[i]], parts[i].width);
      row_h[row[i]] = std::max(row_h[row[i]], parts[i].height);
    }
    const double margin = 10, title_h = title_.empty() ? 0 : 34;
    double width = margin, height = margin + title_h;
    for (const double w : col_w) width += w + margin;
    for (const double h : row_h) height += h + margin;
    width = std::max(width, detail::text_width(title_, 18) + 2 * margin);

    std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + detail::num(width) + "\" height=\"" + detail::num(height) +
         "\" viewBox=\"0 0 " + detail::num(width) + " " + detail::num(height) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" fill=\"#222\">\n";
    if (!title_.empty()) {
      s += "<title>";
      detail::append_escaped(s, title_);
      s += "</title>\n";
    }
    s += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
    if (!title_.empty()) detail::text(s, width / 2, margin + 20, title_, 18, "middle", "font-weight=\"bold\"");
    for (std::size_t i = 0; i < parts.size(); ++i) {
      double x = margin, y = margin + title_h;
      for (std::size_t k = 0; k < col[i]; ++k) x += col_w[k] + margin;
      for (std::size_t k = 0; k < row[i]; ++k) y += row_h[k] + margin;
      s += "<g class=\"panel\" transform=\"translate(" + detail::num(x) + "," + detail::num(y) + ")\">\n";
      s += parts[i].body;
      s += "</g>\n";
    }
    s += "</svg>\n";
    return s;
  }

  // Writes str() to `path` atomically: a reader sees the old file or the complete new one. Throws
  // plot_error for bad input (before touching the file) and io::checkpoint_error if writing fails.
  void save(const std::filesystem::path& path) const {
    const std::string doc = str();
    io::detail::AtomicFile file(path);
    file.write(doc.data(), doc.size());
    file.commit();
  }

 private:
  std::string title_;
  std::size_t columns_;
  std::vector<std::variant<Heatmap, LineChart>> panels_;
  std::vector<std::size_t> breaks_;
};

// The head view (as bertviz draws it) of one sequence, added to `fig`: every layer's heads as heatmaps, one
// row of the figure per layer (give the figure at least as many columns as heads), rows the queries and
// columns the keys they attend to, both labelled with `tokens`. `attentions` holds one (B, NH, T, T) tensor
// per layer, as a model's output_attentions gives; `batch` picks the sequence. The colour scale starts at 0
// so that masked keys (weight 0) look alike in every head; cells shrink as the sequence grows so that a row
// of heads stays about as wide.
template <class T>
Figure& add_attention(Figure& fig, const std::vector<Tensor<T, 4>>& attentions, const std::vector<std::string>& tokens,
                      index_t batch = 0) {
  if (attentions.empty()) throw plot_error("attention: no layers (the attention weights are empty)");
  for (std::size_t l = 0; l < attentions.size(); ++l) {
    const auto& s = attentions[l].shape();
    const auto n = static_cast<index_t>(tokens.size());
    if (s[2] != n || s[3] != n)
      throw plot_error("attention: layer " + std::to_string(l) + "'s weights are " + shape_string(s) + " but there are " +
                       std::to_string(tokens.size()) + " tokens (expected [B, NH, " + std::to_string(n) + ", " +
                       std::to_string(n) + "])");
    if (batch < 0 || batch >= s[0])
      throw plot_error("attention: sequence " + std::to_string(batch) + " asked for but layer " + std::to_string(l) +
                       " has a batch of " + std::to_string(s[0]));
  }
  const double cell = std::clamp(220.0 / static_cast<double>(tokens.size()), 4.0, 24.0);
  for (std::size_t l = 0; l < attentions.size(); ++l) {
    fig.new_row();
    const auto layer = attentions[l].select(0, batch);
    for (index_t h = 0; h < layer.shape()[0]; ++h)
      fig.add(heatmap(layer.select(0, h), {.title = "layer " + std::to_string(l) + ", head " + std::to_string(h),
                                           .row_labels = tokens,
                                           .col_labels = tokens,
                                           .vmin = 0,
                                           .cell_size = cell}));
  }
  return fig;
}

}  // namespace eigenformer::io::svg
