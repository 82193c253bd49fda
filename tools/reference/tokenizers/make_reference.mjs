// Writes tests/data/tokenizer_gpt2_reference.json (and tokenizer_gpt2_cli_expected.txt, the expected output
// of the tokenize command line on the hard-case file): GPT-2 token ids computed by tiktoken (OpenAI's Rust
// tokenizer compiled to WASM, npm "tiktoken") for the hard cases and for tiny Shakespeare, with
// js-tiktoken (the pure JavaScript port) run beside it and every disagreement between the two recorded.
//
//   cd tools/reference/tokenizers && npm ci
//   node make_reference.mjs [DATA_DIR]          # DATA_DIR: $EIGENFORMER_DATA_DIR, else ../../../../shared/data
//
// The reference is tiktoken's ids: tiktoken is what Python's `tiktoken.get_encoding("gpt2")` runs, and
// its pre-tokeniser uses Rust regex classes (\s = Unicode White_Space). js-tiktoken runs the same pattern
// through JavaScript's RegExp, whose \s differs on U+0085 (not a space in JS) and U+FEFF (a space in JS);
// the cases where that changes the ids are listed under "js_tiktoken_differs".
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { get_encoding } from "tiktoken";
import { getEncoding } from "js-tiktoken";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../..");
const dataDir = resolve(process.argv[2] ?? process.env.EIGENFORMER_DATA_DIR ?? join(repo, "../shared/data"));
const versions = {
  tiktoken: JSON.parse(readFileSync(join(here, "node_modules/tiktoken/package.json"), "utf8")).version,
  "js-tiktoken": JSON.parse(readFileSync(join(here, "node_modules/js-tiktoken/package.json"), "utf8")).version,
};

const wasm = get_encoding("gpt2");
const js = getEncoding("gpt2");
// encode(text, allowed_special="all"): "<|endoftext|>" in the text is the special token 50256.
const reference = (text) => Array.from(wasm.encode(text, "all"));
const referenceOrdinary = (text) => Array.from(wasm.encode_ordinary(text));
const jsIds = (text) => js.encode(text, "all");
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// SHA-256 of the ids as consecutive little-endian uint32 values (what the C++ test hashes too).
function idsSha256(ids) {
  const buf = Buffer.alloc(ids.length * 4);
  ids.forEach((id, i) => buf.writeUInt32LE(id, i * 4));
  return createHash("sha256").update(buf).digest("hex");
}
const fileSha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

const jsDiffers = [];
function record(where, text) {
  const ids = reference(text);
  const other = jsIds(text);
  // Short texts are kept whole; for long ones the place is enough (the text is in the fixture already).
  if (!same(ids, other))
    jsDiffers.push({ where, text: text.length <= 200 ? text : null, tiktoken: ids, js_tiktoken: other });
  return ids;
}

// --- Hard cases: each line of the file (without its "\n"), then the whole file as one text ---------------
const hardPath = join(repo, "tests/data/tokenizer_hard_cases.txt");
const hardBytes = readFileSync(hardPath);
const hardText = hardBytes.toString("utf8");
if (!hardText.endsWith("\n")) throw new Error(`${hardPath}: must end with a newline`);
const hardLines = hardText.slice(0, -1).split("\n").map((text, i) => {
  const entry = { line: i + 1, text, ids: record(`hard case line ${i + 1}`, text) };
  const ordinary = referenceOrdinary(text);
  if (!same(ordinary, entry.ids)) entry.ordinary_ids = ordinary;
  return entry;
});
const hardWhole = record("hard cases, whole file", hardText);

// Cases that a text file cannot hold well (CR, controls, line separators, BOM), as JSON strings.
const extraTexts = [
  "", " ", "\n", "\r\n", "a\r\nb\r\n", "a\n\n\nb", "  \n  ", " \n\n x", "\t\n\t", "x \n y",
  "\u0085", "x \u0085y", "x\u0085\u0085y", "\ufeff", "x \ufeffy", "\ufeffhello",
  "\u2028\u2029", "x \u2028y", "\u000b\u000c", "x \u000by", "\u001c\u001d\u001e\u001f", "x \u001cy",
  "\u0000\u0001\u001b[31mred\u001b[0m", "\u007f\u0080\u009f", "\u00ad", "x \u180ey", "x \u200by",
  "\u3000\u3000x", "x\u00a0\u00a0\u00a0y", "  \u00a0 a",
  "'s", " 's", "''s", "'", "' ", "'\u0301s", "I'", "ab'",
  "\ufffd", "\ufffd\ufffd", "\u{10ffff}", "\ue000\uf8ff", "\u{e0041}",
];
const extra = extraTexts.map((text, i) => ({ text, ids: record(`extra case ${i}`, text) }));

// --- tiny Shakespeare: the whole file as one text, and chunks of 100 lines each encoded alone ------------
const shakespearePath = join(dataDir, "tinyshakespeare/input.txt");
const shakespeareBytes = readFileSync(shakespearePath);
const shakespeare = shakespeareBytes.toString("utf8");
const chunkLines = 100;
const wholeIds = reference(shakespeare);
const wholeJs = jsIds(shakespeare);
if (!same(wholeIds, wholeJs)) jsDiffers.push({ where: "tiny Shakespeare, whole file", text: null });
const lines = shakespeare.split(/(?<=\n)/);  // keeps each line's "\n"
const chunks = [];
for (let first = 0; first < lines.length; first += chunkLines) {
  const text = lines.slice(first, first + chunkLines).join("");
  const ids = reference(text);
  if (!same(ids, jsIds(text))) jsDiffers.push({ where: `tiny Shakespeare lines ${first + 1}-`, text: null });
  chunks.push({ first_line: first + 1, lines: Math.min(chunkLines, lines.length - first), tokens: ids.length,
                sha256: idsSha256(ids) });
}

const out = {
  format: "eigenformer-tokenizer-reference",
  version: 1,
  encoding: "gpt2",
  generator: "tools/reference/tokenizers/make_reference.mjs",
  versions,
  id_hash: "sha256 of the ids as consecutive little-endian uint32",
  hard_cases: {
    file: "tests/data/tokenizer_hard_cases.txt",
    sha256: fileSha256(hardBytes),
    lines: hardLines,
    whole_file_ids: hardWhole,
  },
  extra_cases: extra,
  tinyshakespeare: {
    file: "tinyshakespeare/input.txt",
    bytes: shakespeareBytes.length,
    sha256: fileSha256(shakespeareBytes),
    tokens: wholeIds.length,
    ids_sha256: idsSha256(wholeIds),
    first_ids: wholeIds.slice(0, 64),
    chunk_lines: chunkLines,
    chunks,
  },
  js_tiktoken_differs: jsDiffers,
};

// One JSON value per line for arrays of numbers keeps the file small and diffs readable.
const json = JSON.stringify(out, null, 1).replace(/\[\s+([-\d,\s]+?)\s+\]/g, (_, body) => `[${body.replace(/\s+/g, "")}]`);
const outPath = join(repo, "tests/data/tokenizer_gpt2_reference.json");
writeFileSync(outPath, json + "\n");
// What `tokenize --kind gpt2` must print for the hard-case file: each line's ids, space-separated.
const cliPath = join(repo, "tests/data/tokenizer_gpt2_cli_expected.txt");
writeFileSync(cliPath, hardLines.map((l) => l.ids.join(" ") + "\n").join(""));
wasm.free();
console.log(`wrote ${outPath}: ${hardLines.length} hard-case lines, ${extra.length} extra cases, ` +
            `tiny Shakespeare ${wholeIds.length} tokens in ${chunks.length} chunks; ` +
            `js-tiktoken differs from tiktoken on ${jsDiffers.length} case(s)`);
for (const d of jsDiffers) console.log(`  js-tiktoken differs: ${d.where} ${d.text === null ? "" : JSON.stringify(d.text)}`);
