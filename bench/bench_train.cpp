// One training step of the two small models the examples train, with a PyTorch twin under the same names in
// bench/torch_train.py. Random data of the examples' shapes (speed does not depend on the values, and no data
// set is needed); every case sets its own thread count, the last part of its name, as bench_bert.cpp does.
//   BM_char_gpt_train_step/<threads>          examples/train_char_gpt's default run (nanoGPT's baby GPT:
//       4 layers, 4 heads, 128 channels, block 64, batch 12, 65 characters): train::CharLMTrainer::train_step,
//       i.e. a random batch, forward, cross-entropy, backward, clip_grad_norm 1.0, AdamW
//   BM_seed_classifier_train_step/<threads>   examples/train_sentiment --recipe seed's classifier (pre-LN BERT,
//       hidden 256, 4 layers, 4 heads, feed-forward 1024, dropout 0.1, vocabulary 50260, 256 positions) on
//       batches of 16 sentences of 128 tokens: train::ClassifierTrainer::step with the recipe's AdamW
//       (3e-4 constant, weight decay 0.01 on every parameter, no clipping)
//   BM_gpt2_train_step/<threads>              GPT-2 small (124M) fine-tuning on 4 sequences of 128 random ids:
//       forward with dropout 0.1, cross-entropy, backward, clip_grad_norm 1.0, AdamW (weight decay 0.1 on the
//       2-D tensors); the model drawn as bench_gpt2.cpp's is
//   BM_bert_base_finetune_step/<threads>      BERT-base (bert-base-uncased's shape, post-LN, pooler)
//       fine-tuned as a sequence classifier with two labels on 8 sequences of 128 random ids, Hugging Face
//       Trainer's defaults: dropout 0.1, AdamW 2e-5 with weight decay 0.01 on the matrices, clip_grad_norm
//       1.0 (train::train_step)
//   BM_gpt2_vocab_cross_entropy/<threads>     the loss of a GPT-2 fine-tuning step alone: nn::CrossEntropyLoss
//       forward and backward on 512 x 50257 random logits (4 sequences of 128 tokens over GPT-2's vocabulary)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <eigenformer/models/gpt2.hpp>
#include <eigenformer/train/char_lm.hpp>
#include <eigenformer/train/losses.hpp>
#include <eigenformer/train/optimizers.hpp>
#include <eigenformer/train/sentiment.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "threads.hpp"

namespace ef = eigenformer;

namespace {

void BM_char_gpt_train_step(benchmark::State& state) {
  const bench::Threads threads(state.range(0));
  // Tiny Shakespeare has 65 distinct characters: the same vocabulary size, so the same LM head.
  std::string alphabet;
  for (char c = ' '; alphabet.size() < 65; ++c) alphabet += c;
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<std::int64_t> id(0, 64);
  std::vector<std::int64_t> data(100000);
  for (auto& x : data) x = id(rng);
  ef::train::CharLMTrainer<float> trainer(ef::train::CharLMConfig{}, ef::tokenizers::CharTokenizer::from_text(alphabet));
  trainer.train_step(data);  // warm-up: AdamW's moments are allocated on the first step
  for (auto _ : state) benchmark::DoNotOptimize(trainer.train_step(data).loss);
}
BENCHMARK(BM_char_gpt_train_step)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_seed_classifier_train_step(benchmark::State& state) {
  const bench::Threads threads(state.range(0));
  constexpr std::int64_t batch = 16, tokens = 128, vocab = 50260, pad = 50257;  // GPT-2's ids + [PAD] [CLS] [SEP]
  ef::models::BertConfig c;
  c.vocab_size = vocab;
  c.hidden_size = 256;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.intermediate_size = 1024;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.1;
  c.max_position_embeddings = 256;
  c.layer_norm_eps = 1e-5;
  c.pad_token_id = pad;
  c.num_labels = 2;
  c.pre_layer_norm = true;
  c.add_pooling_layer = false;
  ef::manual_seed(0);
  ef::models::BertForSequenceClassification<float> model(c);
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<std::int64_t> id(0, pad - 1);
  std::vector<ef::train::EncodedExample> data(batch);
  for (std::size_t i = 0; i < data.size(); ++i) {
    data[i].ids.resize(tokens);
    for (auto& x : data[i].ids) x = id(rng);
    data[i].label = static_cast<std::int64_t>(i % 2);
  }
  ef::train::ClassifierTrainer<float> trainer(model, data, pad,
                                              {.batch_size = batch, .epochs = 1, .lr = 3e-4, .weight_decay = 0.01,
                                               .decay_all = true, .warmup_ratio = 0, .schedule = "constant",
                                               .clip = 0, .length_buckets = false});
  std::vector<std::int64_t> rows(batch);
  std::iota(rows.begin(), rows.end(), 0);
  trainer.step(rows);  // warm-up
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step(rows).loss);
}
BENCHMARK(BM_seed_classifier_train_step)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// AdamW as the fine-tuning recipes set it up: weight decay on the matrices only (decays_by_default).
ef::train::AdamW<float> adamw_decaying_matrices(ef::nn::Module<float>& model, double lr,
                                                double weight_decay) {
  ef::train::AdamWOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  return ef::train::AdamW<float>(model.named_parameters(), o, ef::train::decays_by_default<float>);
}

void BM_gpt2_train_step(benchmark::State& state) {
  const bench::Threads threads(state.range(0));
  ef::models::GPT2Config c;  // GPT-2 small
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.1;
  ef::manual_seed(0);
  ef::models::GPT2LMHeadModel<float> model(c);
  auto params = model.named_parameters();
  auto optimizer = adamw_decaying_matrices(model, 1e-4, 0.1);
  ef::nn::CrossEntropyLoss<float> loss;
  constexpr ef::index_t batch = 4, tokens = 128;
  auto x = ef::Tensor<std::int64_t, 2>::empty({batch, tokens}), y = ef::Tensor<std::int64_t, 2>::empty({batch, tokens});
  for (ef::index_t i = 0; i < batch * tokens; ++i) {
    x.data()[i] = (i * 7919) % c.vocab_size;
    y.data()[i] = (i * 104729 + 3) % c.vocab_size;
  }
  model.train();
  auto step = [&] {
    optimizer.zero_grad();
    const float value = loss.forward(model.forward(x), y).item();
    model.backward(loss.backward<3>());
    ef::train::clip_grad_norm(params, 1.0);
    optimizer.step();
    return value;
  };
  step();  // warm-up: AdamW's moments are allocated on the first step
  for (auto _ : state) benchmark::DoNotOptimize(step());
}
BENCHMARK(BM_gpt2_train_step)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_bert_base_finetune_step(benchmark::State& state) {
  const bench::Threads threads(state.range(0));
  ef::models::BertConfig c;  // bert-base-uncased, dropout 0.1
  c.num_labels = 2;
  ef::manual_seed(0);
  ef::models::BertForSequenceClassification<float> model(c);
  auto params = model.named_parameters();
  constexpr double lr = 2e-5;
  auto optimizer = adamw_decaying_matrices(model, lr, 0.01);
  constexpr ef::index_t batch = 8, tokens = 128;
  ef::train::ClassifierBatch b{ef::Tensor<std::int64_t, 2>::empty({batch, tokens}),
                               ef::full<std::int64_t>({batch, tokens}, 1),
                               ef::Tensor<std::int64_t, 1>::empty({batch})};
  for (ef::index_t i = 0; i < batch * tokens; ++i) b.input_ids.data()[i] = (i * 7919) % c.vocab_size;
  for (ef::index_t i = 0; i < batch; ++i) b.labels.data()[i] = i % 2;
  ef::train::train_step(model, optimizer, params, b, lr, 1.0);  // warm-up: AdamW's moments are allocated
  for (auto _ : state)
    benchmark::DoNotOptimize(ef::train::train_step(model, optimizer, params, b, lr, 1.0).loss);
}
BENCHMARK(BM_bert_base_finetune_step)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_gpt2_vocab_cross_entropy(benchmark::State& state) {
  const bench::Threads threads(state.range(0));
  constexpr ef::index_t rows = 512, vocab = 50257;
  ef::manual_seed(0);
  const auto logits = ef::randn<float>({rows, vocab});
  auto target = ef::Tensor<std::int64_t, 1>::empty({rows});
  for (ef::index_t i = 0; i < rows; ++i) target.data()[i] = (i * 7919) % vocab;
  ef::nn::CrossEntropyLoss<float> loss;
  loss.train();
  for (auto _ : state) {
    benchmark::DoNotOptimize(loss.forward(logits, target).item());
    benchmark::DoNotOptimize(loss.backward().data());
  }
}
BENCHMARK(BM_gpt2_vocab_cross_entropy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
