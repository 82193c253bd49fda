// io/svg.hpp: every kind of picture is written and parsed back with a small, strict XML reader (below):
// the document must be well-formed UTF-8 XML with an <svg> root, each heatmap cell one <rect class="cell">
// coloured by its value, each series one <polyline> with one point per value, labels (markup characters,
// quotes, non-ASCII UTF-8, bytes that are not UTF-8) round-tripping as text, confusion counts in their
// cells, files written atomically; and bad input refused with a message naming the problem.
#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <eigenformer/io/svg.hpp>

#include "io_test_support.hpp"
#include "support/errors.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace svg = eigenformer::io::svg;

namespace {

// --- A strict little XML reader: elements, attributes, character data, the five predefined entities and
// numeric references; comments and processing instructions skipped. Anything else throws. -------------

struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // the character data directly inside this element, entities decoded
  std::vector<std::unique_ptr<Element>> children;

  std::string attr(const std::string& k) const {
    const auto it = attrs.find(k);
    return it == attrs.end() ? std::string() : it->second;
  }
  // Every element below (and including) this one with that name and, if given, that class attribute.
  void find_all(const std::string& n, const std::string& cls, std::vector<const Element*>& out) const {
    if (name == n && (cls.empty() || attr("class") == cls)) out.push_back(this);
    for (const auto& c : children) c->find_all(n, cls, out);
  }
  std::vector<const Element*> all(const std::string& n, const std::string& cls = "") const {
    std::vector<const Element*> out;
    find_all(n, cls, out);
    return out;
  }
  const Element* child(const std::string& n) const {
    for (const auto& c : children)
      if (c->name == n) return c.get();
    return nullptr;
  }
};

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) out += static_cast<char>(cp);
  else if (cp < 0x800) out += static_cast<char>(0xC0 | cp >> 6), out += static_cast<char>(0x80 | (cp & 0x3F));
  else if (cp < 0x10000)
    out += static_cast<char>(0xE0 | cp >> 12), out += static_cast<char>(0x80 | (cp >> 6 & 0x3F)),
        out += static_cast<char>(0x80 | (cp & 0x3F));
  else
    out += static_cast<char>(0xF0 | cp >> 18), out += static_cast<char>(0x80 | (cp >> 12 & 0x3F)),
        out += static_cast<char>(0x80 | (cp >> 6 & 0x3F)), out += static_cast<char>(0x80 | (cp & 0x3F));
}

// Throws unless `s` is UTF-8 without the characters XML 1.0 forbids.
void check_xml_chars(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    const unsigned c = p[i];
    std::size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > s.size()) throw std::runtime_error("bad UTF-8 at byte " + std::to_string(i));
    std::uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) throw std::runtime_error("bad UTF-8 continuation at byte " + std::to_string(i + k));
      cp = cp << 6 | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      throw std::runtime_error("overlong or invalid code point at byte " + std::to_string(i));
    if ((cp < 0x20 && cp != 0x9 && cp != 0xA && cp != 0xD) || cp == 0xFFFE || cp == 0xFFFF)
      throw std::runtime_error("character not allowed in XML at byte " + std::to_string(i));
    i += len;
  }
}

class XmlReader {
 public:
  explicit XmlReader(const std::string& s) : s_(s) {}

  std::unique_ptr<Element> document() {
    check_xml_chars(s_);
    skip_misc();
    if (!peek("<") || peek("</")) fail("expected the root element");
    auto root = element();
    skip_misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("XML error at byte " + std::to_string(i_) + ": " + why);
  }
  bool peek(const char* t) const { return s_.compare(i_, std::char_traits<char>::length(t), t) == 0; }
  void expect(const char* t) {
    if (!peek(t)) fail(std::string("expected '") + t + "'");
    i_ += std::char_traits<char>::length(t);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void skip_misc() {  // whitespace, <?...?> and <!--...-->
    for (;;) {
      skip_space();
      if (peek("<?")) {
        const auto e = s_.find("?>", i_);
        if (e == std::string::npos) fail("unterminated processing instruction");
        i_ = e + 2;
      } else if (peek("<!--")) {
        const auto e = s_.find("-->", i_);
        if (e == std::string::npos) fail("unterminated comment");
        i_ = e + 3;
      } else {
        return;
      }
    }
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
  }
  std::string name() {
    const auto b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (i_ == b || std::isdigit(static_cast<unsigned char>(s_[b])) || s_[b] == '-') fail("bad name");
    return s_.substr(b, i_ - b);
  }
  // Character data up to `end` (excluded), with references decoded; '<' is an error inside attributes.
  std::string chars(char end, bool attribute) {
    std::string out;
    while (i_ < s_.size() && s_[i_] != end) {
      const char c = s_[i_];
      if (c == '<') fail("'<' in an attribute value");
      if (c == '&') {
        const auto semi = s_.find(';', i_);
        if (semi == std::string::npos || semi - i_ > 12) fail("unterminated reference");
        const std::string ref = s_.substr(i_ + 1, semi - i_ - 1);
        static const std::map<std::string, std::string> named = {
            {"lt", "<"}, {"gt", ">"}, {"amp", "&"}, {"quot", "\""}, {"apos", "'"}};
        if (const auto it = named.find(ref); it != named.end()) out += it->second;
        else if (ref.size() > 1 && ref[0] == '#') {
          const bool hex = ref[1] == 'x';
          std::size_t used = 0;
          const auto cp = std::stoul(ref.substr(hex ? 2 : 1), &used, hex ? 16 : 10);
          if (used != ref.size() - (hex ? 2 : 1)) fail("bad character reference");
          if ((cp < 0x20 && cp != 9 && cp != 10 && cp != 13) || cp > 0x10FFFF) fail("reference to a forbidden character");
          append_utf8(out, static_cast<std::uint32_t>(cp));
        } else {
          fail("unknown entity &" + ref + ";");
        }
        i_ = semi + 1;
      } else {
        if (attribute && (c == '\n' || c == '\t')) out += ' ';  // attribute-value normalisation
        else out += c;
        ++i_;
      }
    }
    if (i_ >= s_.size()) fail("unexpected end of document");
    return out;
  }
  std::unique_ptr<Element> element() {
    auto e = std::make_unique<Element>();
    expect("<");
    e->name = name();
    for (;;) {
      const auto before = i_;
      skip_space();
      if (peek("/>")) {
        i_ += 2;
        return e;
      }
      if (peek(">")) {
        ++i_;
        break;
      }
      if (i_ == before) fail("expected whitespace before an attribute");
      const std::string key = name();
      skip_space();
      expect("=");
      skip_space();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("attribute value not quoted");
      const char q = s_[i_++];
      std::string value = chars(q, true);
      ++i_;
      if (!e->attrs.emplace(key, value).second) fail("duplicate attribute " + key);
    }
    for (;;) {
      if (peek("</")) {
        i_ += 2;
        if (name() != e->name) fail("end tag does not match <" + e->name + ">");
        skip_space();
        expect(">");
        return e;
      }
      if (peek("<!--")) {
        const auto end = s_.find("-->", i_);
        if (end == std::string::npos) fail("unterminated comment");
        i_ = end + 3;
      } else if (peek("<")) {
        e->children.push_back(element());
      } else {
        if (peek("]]>")) fail("']]>' in character data");
        e->text += chars('<', false);
      }
    }
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

std::unique_ptr<Element> parse(const std::string& doc) { return XmlReader(doc).document(); }

std::vector<std::string> texts(const std::vector<const Element*>& elements) {
  std::vector<std::string> out;
  for (const auto* e : elements) out.push_back(e->text);
  return out;
}

// The points of a polyline as (x, y) pairs.
std::vector<std::pair<double, double>> points(const Element& polyline) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(polyline.attr("points"));
  std::string pair;
  while (in >> pair) {
    const auto comma = pair.find(',');
    REQUIRE(comma != std::string::npos);
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

const std::string replacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

TEST_CASE("svg: the XML reader of these tests refuses malformed documents") {
  CHECK_NOTHROW(parse("<?xml version=\"1.0\"?>\n<svg a=\"1 &amp; 2\"><g><text>x &lt; y</text></g><rect/></svg>\n"));
  for (const char* bad : {"<svg><g></svg>", "<svg a=1></svg>", "<svg>a & b</svg>", "<svg a=\"<\"></svg>",
                          "<svg></svg><svg></svg>", "<svg>&nbsp;</svg>", "<svg a=\"1\" a=\"2\"/>", "<svg>\x01</svg>",
                          "<svg>\xC3(</svg>", "<svg>\xC0\xAF</svg>", "<svg"})
    CHECK_THROWS_EXACTLY(parse(bad), std::runtime_error);
  const auto root = parse("<svg><text>&lt;&amp;&gt;&quot;&apos;&#233;&#x65E5;</text></svg>");
  CHECK(root->child("text")->text == "<&>\"'\xC3\xA9\xE6\x97\xA5");
}

TEST_CASE("svg: a heatmap has one cell per value, coloured by value, with the labels on both axes") {
  // Tokens with markup characters, quotes, non-ASCII UTF-8 (2-, 3- and 4-byte) and one invalid byte.
  const std::vector<std::string> rows = {"<s>", "a&b", "\"q\" 'x'"};
  const std::vector<std::string> cols = {"caf\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x98\x80", "bad\xFF"};
  svg::Heatmap h;
  h.rows = 3, h.cols = 4;
  for (int i = 0; i < 12; ++i) h.values.push_back(i == 5 ? -2.0 : i == 7 ? 9.0 : 0.5);
  h.options.title = "layer 0 <head 1>";
  h.options.row_labels = rows;
  h.options.col_labels = cols;

  svg::Figure fig("Attention & more");
  fig.add(h);
  const auto root = parse(fig.str());
  CHECK(root->name == "svg");
  CHECK(root->attr("xmlns") == "http://www.w3.org/2000/svg");
  CHECK(std::stod(root->attr("width")) > 0);
  CHECK(root->child("title")->text == "Attention & more");

  const auto cells = root->all("rect", "cell");
  REQUIRE(cells.size() == 12);
  // Row-major, one per value, on a regular grid: cell 5 is row 1, column 1.
  const double w = std::stod(cells[0]->attr("width"));
  CHECK(std::stod(cells[5]->attr("x")) == doctest::Approx(w));
  CHECK(std::stod(cells[5]->attr("y")) == doctest::Approx(w));
  CHECK(std::stod(cells[11]->attr("x")) == doctest::Approx(3 * w));
  // viridis: the minimum is its first colour, the maximum its last, the rest in between.
  CHECK(cells[5]->attr("fill") == "#440154");
  CHECK(cells[7]->attr("fill") == "#fde725");
  CHECK(cells[0]->attr("fill") != "#440154");
  CHECK(cells[0]->attr("fill") != "#fde725");
  // Tooltips name the cell and its value.
  CHECK(cells[7]->child("title")->text == "a&b / bad" + replacement + ": 9.00");

  CHECK(texts(root->all("text", "row-label")) == rows);
  const auto col_texts = texts(root->all("text", "col-label"));
  REQUIRE(col_texts.size() == 4);
  CHECK(col_texts[0] == cols[0]);
  CHECK(col_texts[1] == cols[1]);
  CHECK(col_texts[2] == cols[2]);
  CHECK(col_texts[3] == "bad" + replacement);  // the invalid byte becomes U+FFFD, never raw
  bool title_found = false;
  for (const auto* t : root->all("text")) title_found |= t->text == "layer 0 <head 1>";
  CHECK(title_found);
  CHECK(root->all("rect", "colorbar").size() == 1);
  CHECK(root->all("linearGradient").size() == 1);
}

TEST_CASE("svg: heatmaps from tensors and nested vectors, index ticks without labels, control characters") {
  auto t = eigenformer::Tensor<float, 2>::empty({2, 3});
  for (eigenformer::index_t i = 0; i < 2; ++i)
    for (eigenformer::index_t j = 0; j < 3; ++j) t(i, j) = static_cast<float>(i * 3 + j);
  const auto h = svg::heatmap(t, {.title = "t"});
  CHECK(h.rows == 2);
  CHECK(h.cols == 3);
  CHECK(h.values == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(svg::heatmap(std::vector<std::vector<int>>{{1, 2}, {3, 4}, {5, 6}}).rows == 3);

  svg::Figure fig;
  fig.add(h);
  svg::HeatmapOptions o;
  o.row_labels = {"tab\there", std::string("nul\0x", 5), "bell\x07"};
  o.col_labels = {"a", "b"};
  o.annotate = true;
  fig.add(svg::heatmap(std::vector<std::vector<double>>{{0, 1}, {2, 3}, {4, 5}}, o));
  const auto root = parse(fig.str());
  CHECK(root->all("g", "panel").size() == 2);
  CHECK(root->all("rect", "cell").size() == 12);
  CHECK(root->all("text", "value").size() == 6);  // annotate: one value per cell of the second heatmap
  // No labels given: the row and column indices (every one here, the matrix is small).
  const auto rl = texts(root->all("text", "row-label"));
  REQUIRE(rl.size() == 5);
  CHECK(rl[0] == "0");
  CHECK(rl[1] == "1");
  CHECK(rl[2] == "tab\there");
  CHECK(rl[3] == "nul" + replacement + "x");
  CHECK(rl[4] == "bell" + replacement);
}

TEST_CASE("svg: large heatmaps label every n-th row and column, at round indices") {
  svg::Heatmap h;
  h.rows = 100, h.cols = 200;
  h.values.assign(20000, 0.0);
  h.values[0] = 1;
  svg::Figure fig;
  fig.add(h);
  const auto root = parse(fig.str());
  CHECK(root->all("rect", "cell").size() == 20000);
  const auto cl = texts(root->all("text", "col-label"));
  REQUIRE(cl.size() >= 4);
  CHECK(cl.size() < 60);
  const int step = std::stoi(cl[1]);
  CHECK((step == 5 || step == 10 || step == 20 || step == 50));
  for (std::size_t k = 0; k < cl.size(); ++k) CHECK(std::stoi(cl[k]) == static_cast<int>(k) * step);
}

TEST_CASE("svg: a line chart has one polyline per series with one point per value, and a legend") {
  svg::LineChart c;
  c.title = "loss";
  c.x_label = "step";
  c.y_label = "cross-entropy";
  svg::Series train{.name = "train <loss>"}, val{.name = "val"};
  for (int i = 0; i < 100; ++i) train.x.push_back(i), train.y.push_back(4.0 - 0.03 * i);
  for (int i = 0; i < 100; i += 20) val.x.push_back(i), val.y.push_back(4.2 - 0.025 * i);
  c.series = {train, val};
  svg::Figure fig("run");
  fig.add(c);
  const auto root = parse(fig.str());
  const auto lines = root->all("polyline", "series");
  REQUIRE(lines.size() == 2);
  const auto p0 = points(*lines[0]), p1 = points(*lines[1]);
  REQUIRE(p0.size() == 100);
  REQUIRE(p1.size() == 5);
  // x grows to the right, and a falling loss goes down the page (SVG y grows downwards).
  for (std::size_t i = 1; i < p0.size(); ++i) {
    CHECK(p0[i].first > p0[i - 1].first);
    CHECK(p0[i].second > p0[i - 1].second);
  }
  CHECK(lines[0]->attr("stroke") != lines[1]->attr("stroke"));
  CHECK(lines[0]->child("title")->text == "train <loss>");
  CHECK(texts(root->all("text", "legend")) == std::vector<std::string>{"train <loss>", "val"});
  CHECK(root->all("circle", "marker").size() == 5);  // short series get dots, long ones do not
  CHECK(root->all("text", "tick").size() >= 6);
  bool x_label = false, y_label = false;
  for (const auto* t : root->all("text")) x_label |= t->text == "step", y_label |= t->text == "cross-entropy";
  CHECK(x_label);
  CHECK(y_label);
  // Both ends of the y range are inside the plot area, whose frame is the first rect of the panel.
  const auto frame = root->all("g", "panel")[0]->child("rect");
  REQUIRE(frame != nullptr);
  const double top = std::stod(frame->attr("y")), bottom = top + std::stod(frame->attr("height"));
  for (const auto& [x, y] : p0) CHECK((y >= top - 1e-9 && y <= bottom + 1e-9));
}

TEST_CASE("svg: a confusion matrix shows every count in its cell, classes on both axes") {
  const std::vector<std::vector<std::int64_t>> counts = {{50, 3, 0}, {7, 41, 2}, {1, 0, 66}};
  const std::vector<std::string> names = {"neg", "neutral & mixed", "pos"};
  svg::Figure fig;
  fig.add(svg::confusion_matrix(counts, names, "test set"));
  const auto root = parse(fig.str());
  const auto cells = root->all("rect", "cell");
  REQUIRE(cells.size() == 9);
  CHECK(texts(root->all("text", "value")) ==
        std::vector<std::string>{"50", "3", "0", "7", "41", "2", "1", "0", "66"});
  CHECK(texts(root->all("text", "row-label")) == names);
  CHECK(texts(root->all("text", "col-label")) == names);
  // White-to-blue from 0: the zero cells are the lightest colour, the largest count the darkest.
  CHECK(cells[2]->attr("fill") == "#f7fbff");
  CHECK(cells[8]->attr("fill") == "#08306b");
  CHECK(cells[1]->child("title")->text == "neg / neutral & mixed: 3");
}

TEST_CASE("svg: panels in a grid and rows, saved atomically") {
  svg::Figure fig("grid", 2);
  for (int k = 0; k < 3; ++k) fig.add(svg::heatmap(std::vector<std::vector<double>>{{0, 1}, {1, double(k)}}));
  fig.new_row();
  fig.add(svg::LineChart{.series = {{.name = "", .x = {0, 1}, .y = {1, 0}}}});
  const auto doc = fig.str();
  const auto root = parse(doc);
  const auto panels = root->all("g", "panel");
  REQUIRE(panels.size() == 4);
  // Two columns: panels 0 and 1 side by side, 2 below 0, and 3 (after new_row) below 2.
  auto origin = [](const Element* g) {
    const auto t = g->attr("transform");  // translate(x,y)
    const auto open = t.find('('), comma = t.find(','), close = t.find(')');
    return std::pair{std::stod(t.substr(open + 1, comma - open - 1)), std::stod(t.substr(comma + 1, close - comma - 1))};
  };
  CHECK(origin(panels[1]).first > origin(panels[0]).first);
  CHECK(origin(panels[1]).second == origin(panels[0]).second);
  CHECK(origin(panels[2]).first == origin(panels[0]).first);
  CHECK(origin(panels[2]).second > origin(panels[0]).second);
  CHECK(origin(panels[3]).first == origin(panels[0]).first);
  CHECK(origin(panels[3]).second > origin(panels[2]).second);
  // Every gradient and clip path id is unique within the document.
  std::map<std::string, int> ids;
  for (const auto* name : {"linearGradient", "clipPath"})
    for (const auto* e : root->all(name)) ++ids[e->attr("id")];
  CHECK(ids.size() == 4);
  for (const auto& id_count : ids) CHECK_MESSAGE(id_count.second == 1, id_count.first);

  ScratchDir dir;
  const auto file = dir / "fig.svg";
  write_bytes(file, "old");
  fig.save(file);
  CHECK(read_bytes(file) == doc);
  CHECK(dir.entries() == std::vector<std::string>{"fig.svg"});  // no temporary file left behind
  // A directory that does not exist: an error naming the file, and nothing written.
  CHECK(error_of<eigenformer::io::checkpoint_error>([&] { fig.save(dir / "missing" / "fig.svg"); }).find("fig.svg") != std::string::npos);
  CHECK_THROWS_EXACTLY(fig.save(dir / "missing" / "fig.svg"), eigenformer::io::checkpoint_error);
  // Bad input throws before the file is touched.
  svg::Figure empty;
  CHECK_THROWS_EXACTLY(empty.save(file), svg::plot_error);
  CHECK(read_bytes(file) == doc);
}

TEST_CASE("svg: bad input is refused with a message naming the picture and the problem") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto add = [](auto picture) {
    svg::Figure f;
    f.add(std::move(picture));
  };
  auto heat = [](std::size_t r, std::size_t c, std::vector<double> v, svg::HeatmapOptions o = {}) {
    return svg::Heatmap{.rows = r, .cols = c, .values = std::move(v), .options = std::move(o)};
  };
  CHECK(error_of<svg::plot_error>([&] { add(heat(0, 0, {}, {.title = "attn"})); }) == "heatmap \"attn\": the matrix is empty (0 x 0)");
  CHECK(error_of<svg::plot_error>([&] { add(heat(2, 2, {1, 2, 3})); }) == "heatmap: 3 values for a 2 x 2 matrix");
  CHECK(error_of<svg::plot_error>([&] { add(heat(2, 2, {1, 2, 3, 4}, {.row_labels = {"a"}})); }) == "heatmap: 1 row labels for 2 rows");
  CHECK(error_of<svg::plot_error>([&] { add(heat(2, 2, {1, 2, 3, 4}, {.col_labels = {"a", "b", "c"}})); }) ==
        "heatmap: 3 column labels for 2 columns");
  CHECK(error_of<svg::plot_error>([&] { add(heat(2, 2, {1, 2, nan, 4})); }).find("row 1, column 0 is NaN") != std::string::npos);
  CHECK(error_of<svg::plot_error>([&] { add(heat(1, 2, {1, -inf})); }).find("column 1 is infinite") != std::string::npos);
  CHECK(error_of<svg::plot_error>([&] { add(heat(1, 2, {1, 2}, {.vmin = 1, .vmax = 1})); }).find("vmin must be less than vmax") !=
        std::string::npos);
  CHECK(error_of<svg::plot_error>([] { svg::heatmap(std::vector<std::vector<double>>{{1, 2}, {3}}); }) ==
        "heatmap: row 1 has 1 values but row 0 has 2");
  CHECK_THROWS_EXACTLY(add(heat(0, 3, {})), svg::plot_error);
  CHECK_THROWS_AS(add(heat(1, 1, {nan})), std::invalid_argument);  // plot_error is an invalid_argument

  CHECK(error_of<svg::plot_error>([&] { add(svg::LineChart{.title = "loss"}); }) == "line chart \"loss\": no series to draw");
  CHECK(error_of<svg::plot_error>([&] { add(svg::LineChart{.series = {{.name = "train", .x = {1, 2}, .y = {1}}}}); }) ==
        "line chart: series \"train\" has 2 x values but 1 y values");
  CHECK(error_of<svg::plot_error>([&] { add(svg::LineChart{.series = {{.name = "a", .x = {1}, .y = {1}}, {.name = "", .x = {}, .y = {}}}}); }) ==
        "line chart: series 1 has no points");
  CHECK(error_of<svg::plot_error>([&] { add(svg::LineChart{.series = {{.name = "val", .x = {1, 2, 3}, .y = {1, nan, 2}}}}); })
            .find("series \"val\", point 1: NaN") != std::string::npos);
  CHECK(error_of<svg::plot_error>([&] { add(svg::LineChart{.series = {{.name = "v", .x = {inf}, .y = {1}}}}); }).find("infinite") !=
        std::string::npos);
  CHECK(error_of<svg::plot_error>([&] { add(svg::LineChart{.series = {{.name = "v", .x = {1}, .y = {1}}}, .ymin = 2, .ymax = 1}); })
            .find("ymin must be less than ymax") != std::string::npos);

  CHECK(error_of<svg::plot_error>([] { svg::confusion_matrix({}, {}); }) == "confusion matrix \"Confusion matrix\": no classes (the matrix is empty)");
  CHECK(error_of<svg::plot_error>([] { svg::confusion_matrix({{1, 2}, {3, 4}}, {"a"}, "cm"); }) ==
        "confusion matrix \"cm\": 1 class names for 2 classes");
  CHECK(error_of<svg::plot_error>([] { svg::confusion_matrix({{1, 2}, {3}}, {"a", "b"}, "cm"); }).find("row 1 has 1 counts") !=
        std::string::npos);
  CHECK(error_of<svg::plot_error>([] { svg::confusion_matrix({{1, -2}, {3, 4}}, {"a", "b"}, "cm"); }).find("negative count -2") !=
        std::string::npos);
  // All zero counts still draw (on a 0..1 scale).
  svg::Figure zeros;
  zeros.add(svg::confusion_matrix({{0, 0}, {0, 0}}, {"a", "b"}));
  CHECK(parse(zeros.str())->all("rect", "cell").size() == 4);

  CHECK(error_of<svg::plot_error>([] { svg::Figure f("nothing"); (void)f.str(); }) == "figure \"nothing\": nothing to draw (no panels added)");
  CHECK_THROWS_EXACTLY(svg::Figure("x", 0), svg::plot_error);
}

TEST_CASE("svg: add_attention draws every layer's heads of one sequence, a row per layer, tokens on both axes") {
  // 2 layers of (batch 2, 3 heads, 2 x 2): value 1000 l + 100 b + 10 h + (2 q + k), so each cell names its source.
  std::vector<eigenformer::Tensor<float, 4>> attentions;
  for (int l = 0; l < 2; ++l) {
    auto t = eigenformer::Tensor<float, 4>::empty({2, 3, 2, 2});
    for (eigenformer::index_t b = 0; b < 2; ++b)
      for (eigenformer::index_t h = 0; h < 3; ++h)
        for (eigenformer::index_t q = 0; q < 2; ++q)
          for (eigenformer::index_t k = 0; k < 2; ++k) t(b, h, q, k) = static_cast<float>(1000 * l + 100 * b + 10 * h + 2 * q + k);
    attentions.push_back(t);
  }
  const std::vector<std::string> tokens = {"[CLS]", "hi"};
  svg::Figure fig("heads", 3);
  svg::add_attention(fig, attentions, tokens, 1);
  const auto root = parse(fig.str());
  const auto panels = root->all("g", "panel");
  REQUIRE(panels.size() == 6);
  const auto cells = root->all("rect", "cell");
  REQUIRE(cells.size() == 24);
  // Layer-major, then head, then row-major cells, all of sequence 1.
  CHECK(cells[0]->child("title")->text == "[CLS] / [CLS]: 100.00");
  CHECK(cells[7]->child("title")->text == "hi / hi: 113.00");
  CHECK(cells[23]->child("title")->text == "hi / hi: 1123.00");
  CHECK(texts(panels[4]->all("text", "row-label")) == tokens);
  CHECK(texts(panels[4]->all("text", "col-label")) == tokens);
  bool title_found = false;
  for (const auto* t : panels[5]->all("text")) title_found |= t->text == "layer 1, head 2";
  CHECK(title_found);
  // A row of heads per layer: panel 3 (layer 1, head 0) starts the second row.
  CHECK(panels[3]->attr("transform").find("translate(10,") == 0);
  CHECK(panels[3]->attr("transform") != panels[0]->attr("transform"));

  CHECK(error_of<svg::plot_error>([&] { svg::add_attention(fig, std::vector<eigenformer::Tensor<float, 4>>{}, tokens); }) ==
        "attention: no layers (the attention weights are empty)");
  CHECK(error_of<svg::plot_error>([&] { svg::add_attention(fig, attentions, {"a", "b", "c"}); }) ==
        "attention: layer 0's weights are [2, 3, 2, 2] but there are 3 tokens (expected [B, NH, 3, 3])");
  CHECK(error_of<svg::plot_error>([&] { svg::add_attention(fig, attentions, tokens, 2); }) ==
        "attention: sequence 2 asked for but layer 0 has a batch of 2");
  CHECK(fig.size() == 6);  // nothing added by the refused calls
}

TEST_CASE("svg: constant matrices and single points still give a finite, parseable picture") {
  svg::Figure fig;
  fig.add(svg::heatmap(std::vector<std::vector<double>>{{3, 3}, {3, 3}}));
  fig.add(svg::LineChart{.series = {{.name = "one", .x = {5}, .y = {2}}}});
  const auto doc = fig.str();
  CHECK(doc.find("nan") == std::string::npos);
  CHECK(doc.find("inf") == std::string::npos);
  const auto root = parse(doc);
  CHECK(root->all("rect", "cell").size() == 4);
  const auto line = root->all("polyline", "series");
  REQUIRE(line.size() == 1);
  const auto p = points(*line[0]);
  REQUIRE(p.size() == 1);
  CHECK(std::isfinite(p[0].first));
  CHECK(std::isfinite(p[0].second));
}

TEST_CASE("svg: CsvLog reads the examples' --log files into series") {
  // train_char_gpt's format: per-step rows and evaluation rows in one file, missing fields empty.
  const std::string text =
      "kind,step,lr,loss,train_loss,val_loss\n"
      "eval,0,,,4.2,4.3\n"
      "train,0,0.0001,4.25,,\r\n"
      "train,1,0.0002,4.0,,\n"
      "\n"
      "eval,2,,,3.5,3.75\n"
      "train,2,0.0003,3.";  // a line still being written: left out
  const auto log = svg::CsvLog::parse(text, "run.csv");
  CHECK(log.rows() == 4);
  CHECK(log.has_column("val_loss"));
  CHECK_FALSE(log.has_column("accuracy"));
  const auto loss = log.series("train", "step", "loss", "kind", "train");
  CHECK(loss.name == "train");
  CHECK(loss.x == std::vector<double>{0, 1});
  CHECK(loss.y == std::vector<double>{4.25, 4.0});
  const auto val = log.series("val", "step", "val_loss", "kind", "eval");
  CHECK(val.x == std::vector<double>{0, 2});
  CHECK(val.y == std::vector<double>{4.3, 3.75});
  CHECK(log.series("", "step", "lr").y == std::vector<double>{0.0001, 0.0002});  // every row; empty fields skipped

  CHECK(error_of<svg::plot_error>([&] { (void)log.series("", "step", "accuracy"); }) ==
        "run.csv: no column \"accuracy\" (the header has kind, step, lr, loss, train_loss, val_loss)");
  CHECK(error_of<svg::plot_error>([] { svg::CsvLog::parse("a,b\n1,2\n3\n", "x.csv"); }) ==
        "x.csv: line 3 has 1 fields but the header names 2 columns");
  CHECK(error_of<svg::plot_error>([] { (void)svg::CsvLog::parse("a,b\n1,2\n3,oops\n", "x.csv").series("", "a", "b"); }) ==
        "x.csv: line 3, column \"b\": \"oops\" is not a finite number");
  CHECK(error_of<svg::plot_error>([] { (void)svg::CsvLog::parse("a,b\n1,nan\n", "x.csv").series("", "a", "b"); }).find("not a finite number") !=
        std::string::npos);
  CHECK(error_of<svg::plot_error>([] { svg::CsvLog::parse("", "x.csv"); }) == "x.csv: empty (no header row)");

  ScratchDir dir;
  write_bytes(dir / "run.csv", text);
  CHECK(svg::CsvLog::read(dir / "run.csv").rows() == 4);
  CHECK(error_of<svg::plot_error>([&] { svg::CsvLog::read(dir / "missing.csv"); }).find("missing.csv: cannot open the CSV log") !=
        std::string::npos);
}
