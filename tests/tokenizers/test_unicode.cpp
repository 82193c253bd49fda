// eigenformer/tokenizers/unicode.hpp: UTF-8 decoding of well- and ill-formed input, character classes,
// NFD, accent stripping and lower-casing. Expected values are from the Unicode Standard (Table 3-7 for
// well-formed UTF-8, UnicodeData.txt categories, PropList.txt White_Space) and Python's str methods.
#include <doctest/doctest.h>

#include <eigenformer/tokenizers/unicode.hpp>
#include <string>
#include <vector>

namespace uc = eigenformer::tokenizers::unicode;

namespace {

struct Step {
  char32_t cp;
  int length;
  bool valid;
};

std::vector<Step> steps(std::string_view s) {
  std::vector<Step> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto d = uc::decode(s, i);
    out.push_back({d.cp, d.length, d.valid});
    i += d.length;
  }
  return out;
}

bool operator==(const Step& a, const Step& b) { return a.cp == b.cp && a.length == b.length && a.valid == b.valid; }

constexpr char32_t fffd = 0xFFFD;

}  // namespace

TEST_CASE("unicode::decode: well-formed sequences of 1 to 4 bytes") {
  CHECK(steps("A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80") ==
        std::vector<Step>{{U'A', 1, true}, {0xE9, 2, true}, {0x4E2D, 3, true}, {0x1F600, 4, true}});
  // The boundaries of Table 3-7.
  CHECK(steps("\xC2\x80\xDF\xBF") == std::vector<Step>{{0x80, 2, true}, {0x7FF, 2, true}});
  CHECK(steps("\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80") ==
        std::vector<Step>{{0x800, 3, true}, {0xD7FF, 3, true}, {0xE000, 3, true}});
  CHECK(steps("\xF0\x90\x80\x80\xF4\x8F\xBF\xBF") == std::vector<Step>{{0x10000, 4, true}, {0x10FFFF, 4, true}});
  CHECK(steps(std::string("a\0b", 3)) == std::vector<Step>{{U'a', 1, true}, {0, 1, true}, {U'b', 1, true}});
}

TEST_CASE("unicode::decode: ill-formed input is consumed as maximal subparts, never past the end") {
  // Lone continuation bytes, bytes that never occur, overlongs: one byte each.
  CHECK(steps("\x80\xBF\xC0\xC1\xF5\xFF") ==
        std::vector<Step>{{fffd, 1, false}, {fffd, 1, false}, {fffd, 1, false}, {fffd, 1, false},
                          {fffd, 1, false}, {fffd, 1, false}});
  // C0 AF (overlong '/'): C0 is never a lead byte, AF is a lone continuation.
  CHECK(steps("\xC0\xAF") == std::vector<Step>{{fffd, 1, false}, {fffd, 1, false}});
  // E0 80 80 (overlong): E0 needs A0..BF next, so E0 alone is the subpart.
  CHECK(steps("\xE0\x80\x80") == std::vector<Step>{{fffd, 1, false}, {fffd, 1, false}, {fffd, 1, false}});
  // Surrogate U+D800 encoded (ED A0 80) and U+110000 (F4 90 80 80) are ill-formed at the second byte.
  CHECK(steps("\xED\xA0\x80")[0] == Step{fffd, 1, false});
  CHECK(steps("\xF4\x90\x80\x80")[0] == Step{fffd, 1, false});
  // A truncated sequence: its valid prefix is one subpart, then decoding resumes at the next byte.
  CHECK(steps("\xE2\x82" "A") == std::vector<Step>{{fffd, 2, false}, {U'A', 1, true}});
  CHECK(steps("\xF0\x9F\x98") == std::vector<Step>{{fffd, 3, false}});
  CHECK(steps("\xE4\xB8") == std::vector<Step>{{fffd, 2, false}});  // at the end of the input
}

TEST_CASE("unicode: first_invalid_utf8, is_valid_utf8, to_utf32 report ill-formed bytes") {
  CHECK(uc::is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  CHECK(uc::first_invalid_utf8("ok") == std::string_view::npos);
  CHECK(uc::first_invalid_utf8("abc\xC3(") == 3);
  CHECK_FALSE(uc::is_valid_utf8("\xED\xBF\xBF"));
  std::vector<std::size_t> bad;
  CHECK(uc::to_utf32("a\xFF\xC3\xA9\xE2\x82", &bad) == std::u32string{U'a', fffd, 0xE9, fffd});
  CHECK(bad == std::vector<std::size_t>{1, 4});
}

TEST_CASE("unicode::append_utf8 and decode are inverse on every scalar value") {
  int failures = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = uc::to_utf8(cp);
    const auto d = uc::decode(s, 0);
    if (!d.valid || d.cp != cp || d.length != s.size()) ++failures;
  }
  CHECK(failures == 0);
  CHECK(uc::to_utf8(char32_t{0xD800}) == "\xEF\xBF\xBD");  // not a scalar value: U+FFFD
  CHECK(uc::to_utf8(char32_t{0x110000}) == "\xEF\xBF\xBD");
  CHECK(uc::to_utf8(std::u32string_view(U"a\u00e9\u4e2d")) == "a\xC3\xA9\xE4\xB8\xAD");
}

TEST_CASE("unicode: general categories from utf8proc") {
  CHECK(uc::category_name(U'A') == "Lu");
  CHECK(uc::category_name(0xE9) == "Ll");
  CHECK(uc::category_name(0x4E2D) == "Lo");
  CHECK(uc::category_name(0x02B0) == "Lm");
  CHECK(uc::category_name(U'7') == "Nd");
  CHECK(uc::category_name(0x216B) == "Nl");  // ROMAN NUMERAL TWELVE
  CHECK(uc::category_name(0xBD) == "No");
  CHECK(uc::category_name(0x0301) == "Mn");
  CHECK(uc::category_name(0x0903) == "Mc");
  CHECK(uc::category_name(U'!') == "Po");
  CHECK(uc::category_name(U'$') == "Sc");
  CHECK(uc::category_name(U' ') == "Zs");
  CHECK(uc::category_name(0x2028) == "Zl");
  CHECK(uc::category_name(U'\n') == "Cc");
  CHECK(uc::category_name(0x200B) == "Cf");
  CHECK(uc::category_name(0xE000) == "Co");
  CHECK(uc::category_name(0x0378) == "Cn");
  CHECK(uc::category_name(0x110000) == "Cn");

  CHECK(uc::is_letter(0x00DF));
  CHECK(uc::is_letter(0x1F600) == false);
  CHECK(uc::is_number(0x0663));  // ARABIC-INDIC DIGIT THREE
  CHECK(uc::is_number(0x2460));  // CIRCLED DIGIT ONE (No)
  CHECK_FALSE(uc::is_number(U'x'));
  CHECK(uc::is_punctuation(0x3002));
  CHECK_FALSE(uc::is_punctuation(U'$'));
  CHECK(uc::is_symbol(U'$'));
  CHECK(uc::is_mark(0x0903));
  CHECK(uc::is_nonspacing_mark(0x0301));
  CHECK_FALSE(uc::is_nonspacing_mark(0x0903));
  CHECK(uc::is_control(0x7F));
  CHECK_FALSE(uc::is_control(0x200B));
  CHECK(uc::is_other(0x200B));
  CHECK(uc::is_other(0x0378));
  CHECK_FALSE(uc::is_other(U'a'));
}

TEST_CASE("unicode::is_white_space is exactly the White_Space property (25 code points)") {
  std::vector<char32_t> all;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp)
    if (uc::is_white_space(cp)) all.push_back(cp);
  CHECK(all == std::vector<char32_t>{0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2001,
                                     0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                                     0x2028, 0x2029, 0x202F, 0x205F, 0x3000});
  // Each Zs character is White_Space (a consistency check of the list against utf8proc's categories).
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp)
    if (uc::category(cp) == uc::Category::Zs) CHECK_MESSAGE(uc::is_white_space(cp), "U+" << std::hex << cp);
}

TEST_CASE("unicode: BERT's character classes") {
  CHECK(uc::is_bert_whitespace(U'\t'));
  CHECK(uc::is_bert_whitespace(U'\r'));
  CHECK(uc::is_bert_whitespace(0xA0));     // Zs
  CHECK(uc::is_bert_whitespace(0x3000));   // Zs
  CHECK_FALSE(uc::is_bert_whitespace(0x85));    // Cc
  CHECK_FALSE(uc::is_bert_whitespace(0x2028));  // Zl
  CHECK_FALSE(uc::is_bert_whitespace(0x0B));    // vertical tab: Cc, not in BERT's list

  CHECK(uc::is_bert_control(0x00));
  CHECK(uc::is_bert_control(0x1B));
  CHECK(uc::is_bert_control(0x200B));  // Cf
  CHECK(uc::is_bert_control(0xAD));    // SOFT HYPHEN, Cf
  CHECK_FALSE(uc::is_bert_control(U'\t'));
  CHECK_FALSE(uc::is_bert_control(U'\n'));
  CHECK_FALSE(uc::is_bert_control(0xE000));  // Co

  for (char32_t c : std::u32string_view(U"!/:@[`{~$+^<=>|")) CHECK(uc::is_bert_punctuation(c));
  CHECK(uc::is_bert_punctuation(0xBF));    // ¿ Po
  CHECK(uc::is_bert_punctuation(0x2014));  // — Pd
  CHECK_FALSE(uc::is_bert_punctuation(0x20AC));  // € Sc
  CHECK_FALSE(uc::is_bert_punctuation(U'a'));
  CHECK_FALSE(uc::is_bert_punctuation(U'5'));

  CHECK(uc::is_cjk_ideograph(0x4E2D));
  CHECK(uc::is_cjk_ideograph(0x3400));
  CHECK(uc::is_cjk_ideograph(0x20000));
  CHECK(uc::is_cjk_ideograph(0xF900));
  CHECK(uc::is_cjk_ideograph(0x2F800));
  CHECK_FALSE(uc::is_cjk_ideograph(0x3072));  // hiragana
  CHECK_FALSE(uc::is_cjk_ideograph(0xD55C));  // hangul
  CHECK_FALSE(uc::is_cjk_ideograph(0x3002));  // ideographic full stop
}

TEST_CASE("unicode::nfd decomposes canonically and passes ill-formed bytes through") {
  CHECK(uc::nfd("caf\xC3\xA9") == "cafe\xCC\x81");                            // é -> e U+0301
  CHECK(uc::nfd("\xED\x95\x9C") == "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");  // 한 -> jamo
  // Canonical ordering: U+0323 (ccc 220) before U+0301 (ccc 230).
  CHECK(uc::nfd("a\xCC\x81\xCC\xA3") == "a\xCC\xA3\xCC\x81");
  CHECK(uc::nfd("\xEF\xAC\x81") == "\xEF\xAC\x81");  // ﬁ: compatibility only, so NFD keeps it
  CHECK(uc::nfd("plain ascii") == "plain ascii");
  CHECK(uc::nfd("\xFF\xC3\xA9\xC3") == "\xFF" "e\xCC\x81" "\xC3");
}

TEST_CASE("unicode::strip_accents: NFD, then nonspacing marks removed") {
  CHECK(uc::strip_accents("Cr\xC3\xA8me Br\xC3\xBBl\xC3\xA9" "e") == "Creme Brulee");
  CHECK(uc::strip_accents("na\xC3\xAFve e\xCC\x81") == "naive e");
  CHECK(uc::strip_accents("\xE1\xBA\xA0") == "A");  // Ạ
  // A spacing mark (Mc, U+0903) stays; the nonspacing U+0901 goes.
  CHECK(uc::strip_accents("\xE0\xA4\x95\xE0\xA4\x83\xE0\xA4\x81") == "\xE0\xA4\x95\xE0\xA4\x83");
  CHECK(uc::strip_accents("\xC3\xA9\xFF") == "e\xFF");
}

TEST_CASE("unicode::to_lower follows Python's str.lower()") {
  CHECK(uc::to_lower("HeLLo World 123") == "hello world 123");
  CHECK(uc::to_lower("\xC3\x80\xC3\x89\xC3\x8E") == "\xC3\xA0\xC3\xA9\xC3\xAE");  // ÀÉÎ
  CHECK(uc::to_lower("\xD0\x9F\xD0\xA0\xD0\x98") == "\xD0\xBF\xD1\x80\xD0\xB8");  // ПРИ
  CHECK(uc::to_lower("\xC4\xB0") == "i\xCC\x87");                                  // 'İ'.lower() == 'i̇'
  // Final sigma: 'ΟΔΟΣ'.lower() == 'οδος', 'ΣΑ'.lower() == 'σα', 'Σ'.lower() == 'σ', 'ΑΣ.'.lower() == 'ας.'
  CHECK(uc::to_lower("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3") == "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82");
  CHECK(uc::to_lower("\xCE\xA3\xCE\x91") == "\xCF\x83\xCE\xB1");
  CHECK(uc::to_lower("\xCE\xA3") == "\xCF\x83");
  CHECK(uc::to_lower("\xCE\x91\xCE\xA3.") == "\xCE\xB1\xCF\x82.");
  // Case-ignorable characters are skipped on both sides: 'Α\'Σ\'Α'.lower() == 'α\'σ\'α'.
  CHECK(uc::to_lower("\xCE\x91'\xCE\xA3'\xCE\x91") == "\xCE\xB1'\xCF\x83'\xCE\xB1");
  CHECK(uc::to_lower("\xC3\x41\xFF") == "\xC3" "a\xFF");  // ill-formed bytes unchanged
  // Cased without a case mapping (Other_Lowercase / Other_Uppercase): 'ªΣ'.lower() == 'ªς',
  // '🄰Σ'.lower() == '🄰ς', 'AΣ🅰'.lower() == 'aσ🅰' (a cased letter follows), 'Σº'.lower() == 'σº'.
  CHECK(uc::to_lower("\xC2\xAA\xCE\xA3") == "\xC2\xAA\xCF\x82");
  CHECK(uc::to_lower("\xF0\x9F\x84\xB0\xCE\xA3") == "\xF0\x9F\x84\xB0\xCF\x82");
  CHECK(uc::to_lower("A\xCE\xA3\xF0\x9F\x85\xB0") == "a\xCF\x83\xF0\x9F\x85\xB0");
  CHECK(uc::to_lower("\xCE\xA3\xC2\xBA") == "\xCF\x83\xC2\xBA");
  CHECK(uc::simple_lower(U'Z') == U'z');
  CHECK(uc::simple_lower(0x130) == U'i');
}
