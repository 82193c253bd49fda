// The tokenizers module: text -> token ids -> batches. Link eigenformer::tokenizers (it needs utf8proc);
// eigenformer/eigenformer.hpp does not include this header, so tensor-only users never need utf8proc.
//
//   unicode.hpp         UTF-8 decoding, Unicode classes, NFD and case (utf8proc)
//   gpt2.hpp            GPT2Tokenizer: GPT-2's byte-level BPE (ids equal tiktoken's "gpt2")
//   wordpiece.hpp       BertTokenizer: BERT's basic tokenizer + WordPiece, encode_plus
//   bpe_trainer.hpp     BPE training on word frequencies (Sennrich et al.)
//   char_tokenizer.hpp  a character-level vocabulary
//   pipeline.hpp        classifier inputs, sliding windows, shuffled batches
#pragma once

#include "eigenformer/tokenizers/error.hpp"
#include "eigenformer/tokenizers/unicode.hpp"
#include "eigenformer/tokenizers/gpt2.hpp"
#include "eigenformer/tokenizers/wordpiece.hpp"
#include "eigenformer/tokenizers/bpe_trainer.hpp"
#include "eigenformer/tokenizers/char_tokenizer.hpp"
#include "eigenformer/tokenizers/pipeline.hpp"
