// Writes tests/data/bert_hf_reference.json: what Hugging Face's own BERT tokenizer gives for the inputs the C++
// WordPiece tests use, so those tests compare with a second implementation instead of ids typed in by hand.
//
//   cd tools/reference/tokenizers && npm ci
//   node make_bert_hf_reference.mjs [DATA_DIR]  # DATA_DIR: $EIGENFORMER_DATA_DIR, else ../shared/data next to the repo
//
// The tokenizer is the npm package "@huggingface/tokenizers" (Hugging Face's JavaScript tokenizers, the ones
// transformers.js runs), built from a tokenizer.json laid out as bert-base-uncased's: BertNormalizer (clean
// text, CJK spacing, lower case, accents stripped), BertPreTokenizer, WordPiece ("##", [UNK], 100 characters
// a word), TemplateProcessing "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B:1 [SEP]:1", the five special tokens as
// added tokens. Three vocabularies: "toy" (the 19 tokens below, small enough to reason about by hand),
// "tiny" (tests/data/bert_tiny_cls_hf/vocab.txt, 60 real words) and, for the hard cases only,
// bert-base-uncased from DATA_DIR.
//
// That package encodes one text or a pair; it has no truncation or padding. Those are applied here, to its
// untruncated token lists, by the rules of transformers' encode_plus (truncation="longest_first",
// truncation_side and padding_side "right"): remove one token at a time from the end of the longer sequence
// (of the second on a tie) until the pair fits max_length with its special tokens; pad with [PAD], token
// type 0 and attention mask 0. The special tokens and token types of the result are still the package's
// (its post-processor runs on the truncated lists).
//
// Hard cases: every line of tests/data/tokenizer_hard_cases.txt, with the tiny vocabulary and (DATA_DIR)
// bert-base-uncased. Each line's ids are compared with the Python reference (tokenizers/bert_reference.py,
// Google's rules: run here with --ids for the tiny vocabulary, read from tests/data/bert_reference.json for
// bert-base-uncased). The lines where the two disagree keep both lists ("ids" = Hugging Face's,
// "python_ids") and are counted under "differs"; eigenformer follows Google's rules there (see the top of
// include/eigenformer/tokenizers/wordpiece.hpp), so the C++ test expects python_ids on them. Every run writes
// the same bytes.
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../..");
// An empty EIGENFORMER_DATA_DIR counts as unset, as in CMake.
const dataDir = resolve(process.argv[2] || process.env.EIGENFORMER_DATA_DIR || join(repo, "../shared/data"));
const packageVersion = JSON.parse(
  readFileSync(join(here, "node_modules/@huggingface/tokenizers/package.json"), "utf8"),
).version;
const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// ---- tokenizers ------------------------------------------------------------------------------------------
const SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

function bertTokenizer(tokens) {
  const vocab = Object.fromEntries(tokens.map((t, i) => [t, i]));
  for (const s of SPECIALS) if (!(s in vocab)) throw new Error(`vocabulary has no ${s}`);
  const special = (name, type_id) => ({ SpecialToken: { id: name, type_id } });
  const sequence = (id, type_id) => ({ Sequence: { id, type_id } });
  const json = {
    added_tokens: SPECIALS.map((content) => ({
      id: vocab[content], content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    })),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
    post_processor: {
      type: "TemplateProcessing",
      single: [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0)],
      pair: [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0), sequence("B", 1), special("[SEP]", 1)],
      special_tokens: Object.fromEntries(["[CLS]", "[SEP]"].map((s) => [s, { id: s, ids: [vocab[s]], tokens: [s] }])),
    },
    // bert-base-uncased's decoder has cleanup on ("hello , world" -> "hello, world"); eigenformer's decode
    // only joins the pieces, which is this decoder with cleanup off.
    decoder: { type: "WordPiece", prefix: "##", cleanup: false },
  };
  return new Tokenizer(json, { do_lower_case: true, clean_up_tokenization_spaces: false, model_max_length: 512 });
}

function readVocab(path) {
  const text = readFileSync(path, "utf8");
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines.map((l) => l.replace(/\r$/, ""));
}

// Small enough to reason about by hand: "un ##aff ##able" (the BERT paper's example), "aa" + "##a" for
// longest-match-first, "##ab" that only backtracking could use, a CJK ideograph, a bare "##".
const TOY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello", "world", ",", "!", "a",
  "aa", "##a", "##ab", "中", "##", "##s"];
const TINY_PATH = "tests/data/bert_tiny_cls_hf/vocab.txt";
const vocabularies = { toy: TOY, tiny: readVocab(join(repo, TINY_PATH)) };
const tokenizers = { toy: bertTokenizer(TOY), tiny: bertTokenizer(vocabularies.tiny) };

// ---- encode_plus with transformers' truncation and padding -----------------------------------------------
const DEFAULTS = { max_length: 512, padding: "none", truncation: false, add_special_tokens: true };

function encodePlus(tok, text, pair, options) {
  const o = { ...DEFAULTS, ...options };
  let a = tok.tokenize(text);
  let b = pair === null ? null : tok.tokenize(pair);
  const specials = o.add_special_tokens ? (b === null ? 2 : 3) : 0;
  if (o.truncation) {
    if (o.max_length < specials) throw new Error(`max_length ${o.max_length} < ${specials} special tokens`);
    let excess = a.length + (b?.length ?? 0) + specials - o.max_length;
    for (; excess > 0; --excess) {
      if (b === null || a.length > b.length) a = a.slice(0, -1);
      else b = b.slice(0, -1);
    }
  }
  const { tokens, token_type_ids } = tok.post_processor(a, b, o.add_special_tokens);
  const out = {
    tokens,
    input_ids: tokens.map((t) => tok.token_to_id(t)),
    token_type_ids,
    attention_mask: tokens.map(() => 1),
  };
  if (!o.truncation) {
    // Without truncation the lists must be the package's own encode() of the text or pair.
    const whole = tok.encode(text, { text_pair: pair, add_special_tokens: o.add_special_tokens, return_token_type_ids: true });
    if (!same(whole.ids, out.input_ids) || !same(whole.token_type_ids, out.token_type_ids))
      throw new Error(`encode() and the post-processed tokens differ on ${JSON.stringify([text, pair])}`);
  }
  if (o.padding === "max_length") pad(out, o.max_length, tok);
  return out;
}

function pad(e, length, tok) {
  while (e.input_ids.length < length) {
    e.tokens.push("[PAD]");
    e.input_ids.push(tok.token_to_id("[PAD]"));
    e.token_type_ids.push(0);
    e.attention_mask.push(0);
  }
}

const cases = [];

// ---- encode: one text, ids and WordPiece tokens ----------------------------------------------------------
const ENCODE = [
  ["toy", "unaffable", "the paper's example"],
  ["toy", "aaaa", "longest first: aa ##a ##a, not a ##a ##a ##a"],
  ["toy", "aab", "no backtracking: aa leaves b, which has no piece; a ##ab would have covered the word"],
  ["toy", "Hello, World!", "lower case, punctuation split off"],
  ["toy", "中文", "each CJK ideograph is a word; 文 is not in the vocabulary"],
  ["toy", "hello zzz world", "one [UNK] per unknown word"],
  ["toy", "a".repeat(100), "100 characters: still split (aa and 98 ##a)"],
  ["toy", "a".repeat(101), "101 characters: over max_input_chars_per_word, one [UNK]"],
  ["toy", "", "empty text"],
  ["toy", " \t\n", "whitespace only"],
  ["toy", "Hello, unaffable world!", "the decode round trip's text"],
  ["tiny", "The capital of France is Paris.", "a sentence of real words"],
  ["tiny", "I loved the acting, the films were badly acted!",
    "act ##ing, film ##s, bad ##ly, act ##ed; loved is one [UNK] (love leaves d, and there is no ##d)"],
  ["tiny", "Berlin and Rome: what a great city?", "':' is not in the vocabulary"],
];
for (const [vocab, text, note] of ENCODE) {
  const tok = tokenizers[vocab];
  for (const add_special_tokens of [false, true]) {
    const e = tok.encode(text, { add_special_tokens });
    cases.push({ kind: "encode", vocab, text, add_special_tokens, tokens: e.tokens, ids: e.ids, note });
  }
}

// ---- encode_plus: specials, token types, attention mask, truncation, padding -----------------------------
const ENCODE_PLUS = [
  ["toy", "hello world", null, {}, "one sequence: [CLS] A [SEP], all type 0"],
  ["toy", "hello", "world !", {}, "a pair: B [SEP] has type 1"],
  ["toy", "hello", "world", { max_length: 8, padding: "max_length" }, "padded to max_length: [PAD], type 0, mask 0"],
  ["toy", "hello world", null, { padding: "longest" }, "one sequence is its own longest: no padding"],
  ["toy", "hello", null, { add_special_tokens: false }, "no special tokens"],
  ["toy", "hello", "world !", { add_special_tokens: false }, "a pair without special tokens: types still 0 then 1"],
  ["toy", "hello world hello world", null, { max_length: 4, truncation: true }, "one sequence keeps its head"],
  ["toy", "hello world", null, { max_length: 2, truncation: true }, "only the special tokens are left"],
  ["toy", "hello world hello", null, { max_length: 4 }, "truncation off: max_length alone changes nothing"],
  ["toy", "hello world hello world !", "unaff", { max_length: 7, truncation: true },
    "5 + 2, room for 4: A loses its 3 extra tokens"],
  ["toy", "hello world !", "unaffable", { max_length: 7, truncation: true }, "3 + 3, room for 4: one from each"],
  ["toy", "hello world !", "unaffable", { max_length: 6, truncation: true },
    "3 + 3, room for 3: the odd token comes from the second sequence"],
  ["toy", "hello world", "un aaaa ,", { max_length: 7, truncation: true }, "2 + 5, room for 4: B loses 3"],
  ["toy", "hello world hello world", "hello world", { max_length: 6, truncation: true },
    "4 + 2, room for 3: A loses 2 to equalise, then B the odd one"],
  ["toy", "hello world", "", { max_length: 3, truncation: true }, "an empty second sequence: A gives everything"],
  ["toy", "hello world hello", "unaff", { max_length: 4, truncation: true, add_special_tokens: false },
    "3 + 2 without special tokens, room for 4: A loses 1"],
  ["toy", "hello world hello world", "un", { max_length: 8, truncation: true, padding: "max_length" },
    "truncation then padding: 4 + 1 fit in 8 with the specials"],
  ["toy", "hello world hello world", "unaffable", { max_length: 9, truncation: true, padding: "max_length" },
    "4 + 3, room for 6: A loses 1, then nothing to pad"],
  ["tiny", "The capital of France is Paris.", "Berlin is a big city!", {}, "a pair of real sentences"],
  ["tiny", "The capital of France is Paris.", "Berlin is a big city!", { max_length: 10, truncation: true },
    "7 + 6, room for 7: A loses 1 to equalise, then B 3 and A 2 (B first on each tie)"],
  ["tiny", "a boring film", null, { max_length: 12, padding: "max_length" }, "real words padded"],
];
for (const [vocab, text, text_pair, options, note] of ENCODE_PLUS) {
  const e = encodePlus(tokenizers[vocab], text, text_pair, options);
  cases.push({ kind: "encode_plus", vocab, text, text_pair, options: { ...DEFAULTS, ...options }, ...e, note });
}

// ---- encode_batch: one encode_plus per row, then the rows padded to the longest ---------------------------
const BATCHES = [
  ["toy", ["hello", "hello world !"], [], { padding: "longest" }, "the default: padded to the longest row"],
  ["toy", ["hello", "hello world !"], ["world", "un"], { max_length: 6, padding: "max_length", truncation: true },
    "pairs, truncated and padded to max_length"],
  ["tiny", ["what a great movie !", "bad", "the story was not very fun"], [], { padding: "longest" },
    "three sentences of different lengths"],
];
for (const [vocab, texts, pairs, options, note] of BATCHES) {
  const tok = tokenizers[vocab];
  const rows = texts.map((t, i) => encodePlus(tok, t, pairs.length ? pairs[i] : null, options));
  const length = Math.max(...rows.map((r) => r.input_ids.length));
  if (options.padding === "longest") rows.forEach((r) => pad(r, length, tok));
  const field = (k) => rows.map((r) => r[k]);
  cases.push({
    kind: "batch", vocab, texts, pairs, options: { ...DEFAULTS, ...options },
    input_ids: field("input_ids"), token_type_ids: field("token_type_ids"), attention_mask: field("attention_mask"), note,
  });
}

// ---- decode (the WordPiece decoder without cleanup, special tokens kept) ---------------------------------
const DECODE = [
  ["toy", [2, 8, 10, 9, 11, 3], "special tokens are kept, pieces joined by spaces"],
  ["toy", [5, 6, 7, 0, 0], "## pieces glued to the one before"],
  ["toy", [8, 18], "hello ##s"],
  ["toy", [18, 8], "a ## piece at the start has nothing to glue to"],
  ["toy", [8, 17, 9], "a bare ## vanishes"],
  ["tiny", [2, 5, 6, 7, 8, 9, 10, 14, 3], "a sentence of real words"],
];
for (const [vocab, ids, note] of DECODE) {
  cases.push({ kind: "decode", vocab, ids, text: tokenizers[vocab].decode(ids, { skip_special_tokens: false }), note });
}
const toyEncode = tokenizers.toy.encode("Hello, unaffable world!", { add_special_tokens: false }).ids;
cases.push({
  kind: "decode", vocab: "toy", ids: toyEncode, text: tokenizers.toy.decode(toyEncode), note: "decode of an encode",
});

// ---- hard cases ------------------------------------------------------------------------------------------
const hardPath = join(repo, "tests/data/tokenizer_hard_cases.txt");
const hardBytes = readFileSync(hardPath);
const hardText = hardBytes.toString("utf8");
if (!hardText.endsWith("\n")) throw new Error(`${hardPath}: must end with a newline`);
if (Buffer.from(hardText, "utf8").compare(hardBytes) !== 0) throw new Error(`${hardPath}: not valid UTF-8`);
const hardLines = hardText.slice(0, -1).split("\n");
if (hardLines.some((l) => l.startsWith("#"))) throw new Error(`${hardPath}: comment lines are not handled here`);

function pythonIds(vocabPath) {
  const out = execFileSync("/usr/bin/python3", [join(here, "bert_reference.py"), "--ids", "--vocab", vocabPath],
    { input: hardText, encoding: "utf8" });
  return out.split("\n").slice(0, -1).map((l) => (l === "" ? [] : l.split(" ").map(Number)));
}

const differs = {};
function hardCases(vocab, tok, python) {
  if (python.length !== hardLines.length) throw new Error(`${vocab}: the Python reference gave ${python.length} lines`);
  differs[vocab] = 0;
  hardLines.forEach((text, i) => {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const c = { kind: "hard_case", vocab, line: i + 1, ids };
    if (!same(ids, python[i])) {
      c.python_ids = python[i];
      ++differs[vocab];
    }
    cases.push(c);
  });
}
hardCases("tiny", tokenizers.tiny, pythonIds(join(repo, TINY_PATH)));

const basePath = join(dataDir, "bert-base-uncased/vocab.txt");
const pythonReference = JSON.parse(readFileSync(join(repo, "tests/data/bert_reference.json"), "utf8"));
if (pythonReference.hard_cases.sha256 !== sha256(hardBytes))
  throw new Error("tests/data/bert_reference.json is older than the hard-case file: rerun bert_reference.py first");
if (!existsSync(basePath)) {
  console.error(`make_bert_hf_reference.mjs: ${basePath} not found; give the data directory as the argument`);
  process.exit(1);
}
const baseVocabBytes = readFileSync(basePath);
hardCases("bert-base-uncased", bertTokenizer(readVocab(basePath)), pythonReference.hard_cases.cases.map((c) => c.ids));

// ---- write -----------------------------------------------------------------------------------------------
const counts = {};
for (const c of cases) counts[c.kind] = (counts[c.kind] ?? 0) + 1;
const sortKeys = (v) =>
  Array.isArray(v) ? v.map(sortKeys)
    : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])])) : v;
const envelope = sortKeys({
  counts: { kind: counts },
  differs,
  format: "eigenformer-fixtures",
  generator: "tools/reference/tokenizers/make_bert_hf_reference.mjs",
  hard_cases_sha256: sha256(hardBytes),
  package: `@huggingface/tokenizers ${packageVersion}`,
  version: 1,
  vocabularies: {
    "bert-base-uncased": { sha256: sha256(baseVocabBytes) },
    tiny: { file: TINY_PATH, sha256: sha256(readFileSync(join(repo, TINY_PATH))) },
    toy: { tokens: TOY },
  },
});
// One case a line, as tools/reference/fixture_io.py writes its files.
const head = envelope;
const lines = cases.map((c) => JSON.stringify(sortKeys(c)));
const outPath = join(repo, "tests/data/bert_hf_reference.json");
const headJson = JSON.stringify(head);
writeFileSync(outPath, `{"cases":[\n${lines.join(",\n")}\n],${headJson.slice(1)}\n`);
console.log(`${outPath}: ${readFileSync(outPath).length} bytes, ${cases.length} cases ${JSON.stringify(counts)}`);
console.log(`hard-case lines where Hugging Face and the Python reference differ: ${JSON.stringify(differs)}`);
