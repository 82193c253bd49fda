// Unicode helpers shared by the tokenizers: UTF-8 decoding that never fails on bad bytes, general
// categories and the character classes of GPT-2's pre-tokeniser and BERT's basic tokenizer, NFD,
// accent stripping and lower-casing. Character data comes from utf8proc (Unicode 15 in utf8proc 2.8), not
// from hand-written tables; the few lists below are properties utf8proc does not expose, cited to their
// source.
//
// API (namespace eigenformer::tokenizers::unicode), stable; append new functions at the end:
//   struct Decoded { char32_t cp; std::uint8_t length; bool valid; }
//   Decoded decode(std::string_view s, std::size_t pos)      one code point at byte pos (pos < s.size());
//                                                           invalid -> {U+FFFD, length of the maximal
//                                                           ill-formed subpart (>= 1), false}
//   bool is_valid_utf8(std::string_view)
//   std::size_t first_invalid_utf8(std::string_view)        byte offset, or std::string_view::npos
//   std::u32string to_utf32(std::string_view, std::vector<std::size_t>* invalid_offsets = nullptr)
//                                                           each ill-formed subpart -> one U+FFFD
//   void append_utf8(std::string& out, char32_t cp)          cp must be a scalar value (else U+FFFD)
//   std::string to_utf8(char32_t) / to_utf8(std::u32string_view)
//   enum class Category (values as utf8proc_category_t)
//   Category category(char32_t)   std::string_view category_name(char32_t)  ("Lu", "Mn", ...)
//   bool is_letter(char32_t)          L*
//   bool is_number(char32_t)          N*
//   bool is_punctuation(char32_t)     P*
//   bool is_symbol(char32_t)          S*
//   bool is_mark(char32_t)            M*        bool is_nonspacing_mark(char32_t)  Mn
//   bool is_control(char32_t)         Cc        bool is_other(char32_t)  C* (Cc Cf Cs Co Cn)
//   bool is_white_space(char32_t)     the Unicode White_Space property (regex \s in Rust's regex crate and
//                                     UTS #18; what tiktoken's GPT-2 pattern means by \s)
//   bool is_bert_whitespace(char32_t) BERT _is_whitespace: space, \t, \n, \r, or Zs
//   bool is_bert_control(char32_t)    BERT _is_control: Cc or Cf, except \t \n \r
//   bool is_bert_punctuation(char32_t) BERT _is_punctuation: ASCII non-alphanumeric printable, or P*
//   bool is_cjk_ideograph(char32_t)   BERT _is_chinese_char: the CJK Unified/Compatibility Ideograph blocks
//   char32_t simple_lower(char32_t)   one-to-one lower-case mapping (UnicodeData.txt)
//   std::string nfd(std::string_view)            canonical decomposition (NFD)
//   std::string strip_accents(std::string_view)  NFD, then drop nonspacing marks (Mn), as BERT does
//   std::string to_lower(std::string_view)       Python's str.lower(): full mapping (U+0130) + final sigma
// Strings are UTF-8. Functions taking text never throw on invalid UTF-8: nfd, strip_accents and to_lower
// copy ill-formed bytes through unchanged (use is_valid_utf8 / first_invalid_utf8 to report them).
#pragma once

#include <utf8proc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace eigenformer::tokenizers::unicode {

inline constexpr char32_t replacement_character = 0xFFFD;

// ---------------------------------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------------------------------

struct Decoded {
  char32_t cp;          // the code point, or U+FFFD when !valid
  std::uint8_t length;  // bytes consumed: 1-4; for an ill-formed sequence, its maximal subpart (>= 1)
  bool valid;
};

// Decodes the code point starting at byte `pos` (requires pos < s.size()). Well-formed sequences are those
// of the Unicode Standard, Table 3-7 (no overlongs, no surrogates, nothing above U+10FFFF). An ill-formed
// sequence consumes its "maximal subpart" (Unicode §3.9, U+FFFD substitution of maximal subparts, the
// practice of the WHATWG encoding standard and Python's errors="replace"): the longest prefix of a valid
// sequence, and at least one byte, so a scan always advances.
inline Decoded decode(std::string_view s, std::size_t pos) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  const std::size_t n = s.size() - pos;
  const unsigned b0 = p[0];
  if (b0 < 0x80) return {static_cast<char32_t>(b0), 1, true};
  std::size_t len;
  char32_t cp;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 < 0xC2) {
    return {replacement_character, 1, false};  // continuation byte or overlong 2-byte lead
  } else if (b0 < 0xE0) {
    len = 2;
    cp = b0 & 0x1Fu;
  } else if (b0 < 0xF0) {
    len = 3;
    cp = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;         // no overlongs
    else if (b0 == 0xED) hi = 0x9F;    // no surrogates
  } else if (b0 < 0xF5) {
    len = 4;
    cp = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;         // no overlongs
    else if (b0 == 0xF4) hi = 0x8F;    // nothing above U+10FFFF
  } else {
    return {replacement_character, 1, false};
  }
  for (std::size_t i = 1; i < len; ++i) {
    if (i >= n) return {replacement_character, static_cast<std::uint8_t>(i), false};
    const unsigned b = p[i];
    if (b < lo || b > hi) return {replacement_character, static_cast<std::uint8_t>(i), false};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {cp, static_cast<std::uint8_t>(len), true};
}

inline std::size_t first_invalid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Decoded d = decode(s, i);
    if (!d.valid) return i;
    i += d.length;
  }
  return std::string_view::npos;
}

inline bool is_valid_utf8(std::string_view s) noexcept { return first_invalid_utf8(s) == std::string_view::npos; }

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = replacement_character;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

inline std::string to_utf8(char32_t cp) {
  std::string out;
  append_utf8(out, cp);
  return out;
}

inline std::string to_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

// Code points of `s`; each ill-formed subpart becomes one U+FFFD and, when `invalid_offsets` is given, its
// byte offset is appended there.
inline std::u32string to_utf32(std::string_view s, std::vector<std::size_t>* invalid_offsets = nullptr) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const Decoded d = decode(s, i);
    if (!d.valid && invalid_offsets) invalid_offsets->push_back(i);
    out += d.cp;
    i += d.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// General categories (utf8proc)
// ---------------------------------------------------------------------------------------------------

// The Unicode general category; the values equal utf8proc_category_t's.
enum class Category : std::uint8_t {
  Cn = 0, Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po,
  Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co
};

// Category of a code point; values above U+10FFFF are unassigned (Cn).
inline Category category(char32_t cp) noexcept {
  if (cp > 0x10FFFF) return Category::Cn;
  return static_cast<Category>(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
}

inline std::string_view category_name(char32_t cp) noexcept {
  static constexpr std::string_view names[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                               "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                               "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  return names[static_cast<std::size_t>(category(cp))];
}

namespace detail {
inline bool category_between(char32_t cp, Category first, Category last) noexcept {
  const auto c = category(cp);
  return c >= first && c <= last;
}
}  // namespace detail

inline bool is_letter(char32_t cp) noexcept { return detail::category_between(cp, Category::Lu, Category::Lo); }
inline bool is_mark(char32_t cp) noexcept { return detail::category_between(cp, Category::Mn, Category::Me); }
inline bool is_nonspacing_mark(char32_t cp) noexcept { return category(cp) == Category::Mn; }
inline bool is_number(char32_t cp) noexcept { return detail::category_between(cp, Category::Nd, Category::No); }
inline bool is_punctuation(char32_t cp) noexcept {
  return detail::category_between(cp, Category::Pc, Category::Po);
}
inline bool is_symbol(char32_t cp) noexcept { return detail::category_between(cp, Category::Sm, Category::So); }
inline bool is_control(char32_t cp) noexcept { return category(cp) == Category::Cc; }
inline bool is_other(char32_t cp) noexcept {
  const auto c = category(cp);
  return c == Category::Cn || c >= Category::Cc;
}

// The White_Space property of PropList.txt (unchanged since Unicode 6.3): U+0009-000D, U+0020, U+0085,
// U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000. utf8proc has general categories
// but not this property (it is not a category: tab and newline are Cc, U+2028 is Zl). It is what `\s`
// matches in Rust's regex crate, which tiktoken's pre-tokeniser runs on.
inline bool is_white_space(char32_t cp) noexcept {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || cp == 0x3000) return true;
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F;
}

// BERT's tokenization.py `_is_whitespace`: " ", "\t", "\n", "\r", or general category Zs.
inline bool is_bert_whitespace(char32_t cp) noexcept {
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  return category(cp) == Category::Zs;
}

// BERT's `_is_control`: categories Cc and Cf, except "\t", "\n", "\r" (BERT counts those as whitespace).
inline bool is_bert_control(char32_t cp) noexcept {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  const auto c = category(cp);
  return c == Category::Cc || c == Category::Cf;
}

// BERT's `_is_punctuation`: every ASCII non-letter, non-digit printable character (33-47, 58-64, 91-96,
// 123-126, so "$", "+", "^" and "`" too, which are symbols in Unicode) or general category P*.
inline bool is_bert_punctuation(char32_t cp) noexcept {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
    return true;
  return is_punctuation(cp);
}

// BERT's `_is_chinese_char`: the CJK Unified Ideographs block, extensions A-E, and the CJK Compatibility
// Ideographs (+ Supplement) blocks. Hangul, kana and CJK punctuation are not included (BERT's choice).
inline bool is_cjk_ideograph(char32_t cp) noexcept {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) ||
         (cp >= 0x2B820 && cp <= 0x2CEAF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// The simple (one-to-one) lower-case mapping of UnicodeData.txt; unchanged when there is none.
inline char32_t simple_lower(char32_t cp) noexcept {
  if (cp > 0x10FFFF) return cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

// ---------------------------------------------------------------------------------------------------
// Normalisation and case
// ---------------------------------------------------------------------------------------------------

namespace detail {

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// Calls f(valid_run) for each maximal run of well-formed UTF-8 and g(bad_bytes) for each ill-formed subpart.
template <typename OnValid, typename OnInvalid>
void for_each_utf8_run(std::string_view s, OnValid&& on_valid, OnInvalid&& on_invalid) {
  std::size_t start = 0, i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Decoded d = decode(s, i);
    if (d.valid) {
      i += d.length;
      continue;
    }
    if (i > start) on_valid(s.substr(start, i - start));
    on_invalid(s.substr(i, d.length));
    i += d.length;
    start = i;
  }
  if (i > start) on_valid(s.substr(start, i - start));
}

inline bool is_ascii(std::string_view s) noexcept {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// utf8proc_map on well-formed UTF-8, appended to out.
inline void append_mapped(std::string& out, std::string_view valid, utf8proc_option_t options) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                                          static_cast<utf8proc_ssize_t>(valid.size()), &mapped, options);
  std::unique_ptr<utf8proc_uint8_t, free_deleter> owner(mapped);
  if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
  if (n < 0) throw std::runtime_error(std::string("unicode: utf8proc_map failed: ") + utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n));
}

// Unicode's Cased property (Lowercase or Uppercase or Lt). utf8proc has no property lookup, so: Lu, Ll or Lt,
// or a case mapping, plus the characters cased only through Other_Lowercase / Other_Uppercase (PropList.txt)
// that have no case mapping and are not Case_Ignorable: U+00AA, U+00BA and the Latin capital letters in
// squares and circles U+1F130-1F149, U+1F150-1F169, U+1F170-1F189. (The other Other_Lowercase characters are
// Lm or Mn, so case-ignorable, which the final-sigma rule checks first; the other Other_Uppercase ones have
// case mappings.) Python's str.lower() gives "\u00aa\u03c2" for "\u00aa\u03a3"; the code point sweep in
// tests/tokenizers/test_wordpiece.cpp checks all 80 against Python.
inline bool is_cased(char32_t cp) noexcept {
  if (cp == 0x00AA || cp == 0x00BA) return true;
  if ((cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  const auto c = category(cp);
  if (c == Category::Lu || c == Category::Ll || c == Category::Lt) return true;
  const auto c32 = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_tolower(c32) != c32 || utf8proc_toupper(c32) != c32;
}

// Unicode's Case_Ignorable property: categories Mn, Me, Cf, Lm, Sk, plus the Word_Break classes
// MidLetter, MidNumLet and Single_Quote (DerivedCoreProperties.txt; the Word_Break members from
// WordBreakProperty.txt, listed here since utf8proc does not expose word-break classes).
inline bool is_case_ignorable(char32_t cp) noexcept {
  switch (category(cp)) {
    case Category::Mn:
    case Category::Me:
    case Category::Cf:
    case Category::Lm:
    case Category::Sk:
      return true;
    default:
      break;
  }
  switch (cp) {
    case 0x0027: case 0x002E: case 0x003A: case 0x00B7: case 0x0387: case 0x055F: case 0x05F4:
    case 0x2018: case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55:
    case 0xFF07: case 0xFF0E: case 0xFF1A:
      return true;
    default:
      return false;
  }
}

}  // namespace detail

// Canonical decomposition (NFD) of the well-formed parts of `s`; ill-formed bytes are copied unchanged (they
// end a run, as a starter would).
inline std::string nfd(std::string_view s) {
  if (detail::is_ascii(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  detail::for_each_utf8_run(
      s, [&](std::string_view run) { detail::append_mapped(out, run, static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_STABLE)); },
      [&](std::string_view bad) { out.append(bad); });
  return out;
}

// BERT's `_run_strip_accents`: NFD, then every nonspacing mark (Mn) removed. "Crème Brûlée" -> "Creme Brulee".
inline std::string strip_accents(std::string_view s) {
  if (detail::is_ascii(s)) return std::string(s);
  const std::string decomposed = nfd(s);
  std::string out;
  out.reserve(decomposed.size());
  for (std::size_t i = 0; i < decomposed.size();) {
    const Decoded d = decode(decomposed, i);
    if (!d.valid || !is_nonspacing_mark(d.cp)) out.append(decomposed, i, d.length);
    i += d.length;
  }
  return out;
}

// Whether the U+03A3 at byte `pos` of `s` is in the Final_Sigma context of SpecialCasing.txt, as Python's
// str.lower() decides it: \p{Cased} \p{Case_Ignorable}* U+03A3 !( \p{Case_Ignorable}* \p{Cased} ).
// Ill-formed bytes end the search on their side.
inline bool is_final_sigma(std::string_view s, std::size_t pos) noexcept {
  bool cased_before = false;
  for (std::size_t j = pos; j > 0;) {
    std::size_t k = j - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && j - k < 4) --k;
    const Decoded p = decode(s, k);
    if (!p.valid || k + p.length != j) break;
    if (!detail::is_case_ignorable(p.cp)) {
      cased_before = detail::is_cased(p.cp);
      break;
    }
    j = k;
  }
  if (!cased_before) return false;
  for (std::size_t j = pos + 2; j < s.size();) {
    const Decoded n = decode(s, j);
    if (!n.valid) break;
    if (!detail::is_case_ignorable(n.cp)) return !detail::is_cased(n.cp);
    j += n.length;
  }
  return true;
}

// Lower-casing as Python's str.lower(), which BERT's basic tokenizer calls: the simple mappings, plus the
// one unconditional special mapping of SpecialCasing.txt (U+0130 -> "i" U+0307) and the Final_Sigma rule
// (U+03A3 -> U+03C2 when a cased letter precedes it and none follows, skipping case-ignorable characters).
inline std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (detail::is_ascii(s)) {
    for (char c : s) out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c + ('a' - 'A')) : c;
    return out;
  }
  for (std::size_t i = 0; i < s.size();) {
    const Decoded d = decode(s, i);
    if (!d.valid) {
      out.append(s, i, d.length);
    } else if (d.cp == 0x0130) {
      out += "i\xCC\x87";
    } else if (d.cp == 0x03A3) {
      append_utf8(out, is_final_sigma(s, i) ? char32_t{0x03C2} : char32_t{0x03C3});
    } else {
      append_utf8(out, simple_lower(d.cp));
    }
    i += d.length;
  }
  return out;
}

}  // namespace eigenformer::tokenizers::unicode
