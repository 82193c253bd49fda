// The models module: complete networks built from eigenformer::nn layers, named and laid out as Hugging Face
// checkpoints are, and their generation loops.
//
//   models/gpt2.hpp        GPT2Config, GPT2LMHeadModel > GPT2Model > GPT2Block > GPT2Attention / GPT2MLP
//                          (Hugging Face's module tree and names, tied LM head, Conv1D layout), KVCache
//   models/bert.hpp        BertConfig, BertModel, BertForMaskedLM, BertForSequenceClassification (Hugging Face's
//                          module tree and names, padding masks, the seed's pre-LN encoder as an option)
//   models/generation.hpp  the CausalLM concept (any decoder with make_cache and a cached forward),
//                          GenerationConfig, generate (greedy, temperature, top-k, top-p, sampling equal to
//                          torch.multinomial), the next-token table
//   models/pretrained.hpp  gpt2_from_pretrained / save_pretrained: Hugging Face model directories
//                          (config.json + model.safetensors; needs nlohmann/json, a dependency of
//                          eigenformer::eigenformer)
//   models/pretrained_bert.hpp  bert_from_pretrained<Model> / save_pretrained for the BERT classes, with a
//                          BertLoadReport of the heads left unused or newly initialised
//
// Not included here: models/pretrained_gpt2.hpp and models/pretrained_bert_tokenizer.hpp (model + tokenizer
// from one directory), which need the tokenizers and so eigenformer::tokenizers (utf8proc).
#pragma once

#include "eigenformer/models/bert.hpp"
#include "eigenformer/models/gpt2.hpp"
#include "eigenformer/models/generation.hpp"
#include "eigenformer/models/pretrained.hpp"
#include "eigenformer/models/pretrained_bert.hpp"
