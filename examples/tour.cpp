// A tour of eigenformer on built-in inputs: the tutorials' worked examples, step by step, printing the
// same digits PyTorch prints.
//
//   1. Self-attention by hand (LLMs from scratch, section 3.4.1): manual_seed(123), three rand(3, 2)
//      projection matrices, the query/key/value of "journey", scores, weights and context vector.
//   2. Softmax (BERT from scratch, sections 1.11-1.13): simple normalisation against softmax, and -inf.
//   3. The causal mask (BERT from scratch, listings 1.9-1.12): tril, masked_fill with -inf, softmax.
//   4. Where every other chapter lives: the example and the command that runs it.
//
// Usage: tour [--svg FILE]
//   --svg FILE  also draws the attention weights of sections 1 and 3 as one SVG picture: those of "Your
//               journey starts with one step" with the words on both axes (rows the queries, columns the
//               keys), the causal mask, and the causal weights (nothing right of the diagonal)
//
// Run it with `cmake --workflow --preset demo`, or build/release/examples/tour --svg tour.svg
#include <eigenformer/io/svg.hpp>
#include <eigenformer/random.hpp>
#include <eigenformer/tensor.hpp>

#include "svg_option.hpp"

#include <cmath>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace ef = eigenformer;
namespace svg = ef::io::svg;

namespace {

// The pictures of --svg; null without it.
svg::Figure* figure = nullptr;

void heading(const char* title) { std::cout << "\n== " << title << " ==\n"; }

void self_attention_by_hand() {
  heading("1. Self-attention with trainable weights, step by step (manual_seed(123))");
  // "Your journey starts with one step": one 3-d embedding per token.
  const auto inputs = ef::tensor<float>({{0.43f, 0.15f, 0.89f},    // Your     (x^1)
                                         {0.55f, 0.87f, 0.66f},    // journey  (x^2)
                                         {0.57f, 0.85f, 0.64f},    // starts   (x^3)
                                         {0.22f, 0.58f, 0.33f},    // with     (x^4)
                                         {0.77f, 0.25f, 0.10f},    // one      (x^5)
                                         {0.05f, 0.80f, 0.55f}});  // step     (x^6)
  const auto x_2 = inputs.select(0, 1);
  const ef::index_t d_in = inputs.size(1), d_out = 2;

  ef::manual_seed(123);
  const auto W_query = ef::rand({d_in, d_out});
  const auto W_key = ef::rand({d_in, d_out});
  const auto W_value = ef::rand({d_in, d_out});
  std::cout << "W_query = " << W_query << "\n";

  const auto query_2 = ef::matmul(x_2, W_query);
  std::cout << "query_2 = " << query_2 << "\n";

  const auto keys = ef::matmul(inputs, W_key);      // (6, 2)
  const auto values = ef::matmul(inputs, W_value);  // (6, 2)
  std::cout << "keys.shape = " << ef::shape_string(keys.shape()) << "\n";
  std::cout << "values.shape = " << ef::shape_string(values.shape()) << "\n";

  const auto keys_2 = keys.select(0, 1);
  std::cout << "attn_score_22 = " << ef::matmul(query_2, keys_2) << "\n";

  const auto attn_scores_2 = ef::matmul(query_2, keys.t());
  std::cout << "attn_scores_2 = " << attn_scores_2 << "\n";

  // Scaling by sqrt(d_k) keeps the softmax out of its saturated, vanishing-gradient regime.
  const double d_k = static_cast<double>(keys.size(-1));
  const auto attn_weights_2 = ef::softmax(attn_scores_2 / std::sqrt(d_k), -1);
  std::cout << "attn_weights_2 = " << attn_weights_2 << "\n";

  const auto context_vec_2 = ef::matmul(attn_weights_2, values);
  std::cout << "context_vec_2 = " << context_vec_2 << "\n";

  // The same for every token at once: the rows of this matrix are the six context vectors.
  const auto attn_weights = ef::softmax(ef::matmul(ef::matmul(inputs, W_query), keys.t()) / std::sqrt(d_k), -1);
  std::cout << "all context vectors =\n" << ef::matmul(attn_weights, values) << "\n";
  if (figure) {
    const std::vector<std::string> words = {"Your", "journey", "starts", "with", "one", "step"};
    figure->add(svg::heatmap(attn_weights, {.title = "1. Attention weights (rows: queries, columns: keys)",
                                            .row_labels = words,
                                            .col_labels = words,
                                            .vmin = 0,
                                            .annotate = true,
                                            .cell_size = 44}));
  }
}

void softmax_examples() {
  heading("2. Softmax against simple normalisation");
  const auto x = ef::tensor<float>({1, 2, 3, 6});
  std::cout << "x = " << x << "\n";
  std::cout << "x / x.sum() = " << x / ef::sum(x).item() << "\n";
  std::cout << "softmax(x) = " << ef::softmax(x, -1) << "\n";
  std::cout << "softmax([1, 2, -3, 5]) = " << ef::softmax(ef::tensor<float>({1, 2, -3, 5}), -1) << "\n";
  std::cout << "softmax([2, 3, 5]) = " << ef::softmax(ef::tensor<float>({2, 3, 5}), -1) << "\n";
  const float inf = std::numeric_limits<float>::infinity();
  std::cout << "softmax([2, -inf, -inf]) = " << ef::softmax(ef::tensor<float>({2, -inf, -inf}), -1) << "\n";
  std::cout << "softmax([2, 3, -inf]) = " << ef::softmax(ef::tensor<float>({2, 3, -inf}), -1) << "\n";
}

void causal_mask() {
  heading("3. The causal mask: tril, masked_fill(-inf), softmax");
  const auto A = ef::tensor<float>({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}});
  std::cout << "A:\n" << A << "\n";
  std::cout << "torch.tril(A):\n" << ef::tril(A) << "\n";
  const auto mask_ones = ef::tril(ef::ones_like(A));
  std::cout << "Lower-triangular mask from ones:\n" << mask_ones << "\n";
  std::cout << "A * mask_ones:\n" << A * mask_ones << "\n";

  const ef::index_t seq_len = 5;
  const auto causal = ef::tril(ef::ones<bool>({seq_len, seq_len}));
  std::cout << "Causal mask (True = allowed, False = masked):\n" << causal << "\n";

  // Scaled scores of listing 1.11: row i is 0.5 + 0.25 i + 0.5 j.
  auto scaled_scores = ef::zeros<float>({seq_len, seq_len});
  for (ef::index_t i = 0; i < seq_len; ++i)
    for (ef::index_t j = 0; j < seq_len; ++j) scaled_scores(i, j) = 0.5f + 0.25f * i + 0.5f * j;
  std::cout << "Scaled scores (unmasked):\n" << scaled_scores << "\n";
  const auto masked = ef::masked_fill(scaled_scores, ~causal, -std::numeric_limits<double>::infinity());
  std::cout << "Scaled scores with causal mask:\n" << masked << "\n";
  // Masking before the softmax keeps future tokens out of every row's denominator: no leak.
  const auto weights = ef::softmax(masked, -1);
  std::cout << "Causal attention weights:\n" << weights << "\n";
  std::cout << "Row sums: " << ef::sum(weights, -1) << "\n";
  if (figure) {
    figure->add(svg::heatmap(ef::tril(ef::ones<float>({seq_len, seq_len})),
                             {.title = "3. Causal mask (1 = allowed)", .colormap = svg::Colormap::blues, .annotate = true,
                              .decimals = -1, .cell_size = 44}));
    figure->add(svg::heatmap(weights, {.title = "3. Causal attention weights", .vmin = 0, .annotate = true, .cell_size = 44}));
  }
}

// The demo builds the tour alone; the rest of the tutorials are other examples (chapters.cpp holds the sections
// that need no program of their own), so the tour ends with the way to each of them.
void where_the_chapters_live() {
  heading("4. Where each chapter lives");
  std::cout << "Each command is a program in build/release/examples/, built by\n"
               "  cmake --preset release && cmake --build --preset release\n";
  struct Row {
    const char* section;
    const char* what;
    const char* command;
  };
  const auto table = [](const char* book, std::initializer_list<Row> rows) {
    std::cout << book << "\n";
    for (const auto& r : rows) std::printf("  %-10s %-39s %s\n", r.section, r.what, r.command);
  };
  table("BERT from scratch (seed 000)",
        {{"1.1", "the next token and its probability", "chapters next-token --model DIR  (a Hugging Face GPT-2 directory)"},
         {"1.3", "words, characters and subwords", "chapters tokenize --vocab DIR  (GPT-2's vocabulary)"},
         {"1.4", "byte-pair encoding, merge by merge", "chapters bpe-toy"},
         {"1.5", "integer, binary, sinusoidal positions", "chapters positions  (as pictures: attention --svg FILE)"},
         {"1.9-1.12", "self-attention step by step", "attention"},
         {"1.13", "the causal mask", "section 3 above; zeros or -inf: chapters mask-leak"},
         {"1.14-1.16", "dropout, multi-head attention", "attention"},
         {"1.17-1.18", "LayerNorm, GELU, the feed-forward net", "chapters layernorm-gelu"},
         {"1.19", "shortcut connections", "shortcut"},
         {"1.23", "a Transformer that classifies text", "train_sentiment  (SST-2 from EIGENFORMER_DATA_DIR)"}});
  table("LLMs from scratch, chapter 3 (seed 001)",
        {{"3.4.1", "attention weights by hand", "section 1 above"},
         {"3.4.2", "the SelfAttention_v1 and v2 classes", "attention"},
         {"ex. 3.1", "v2's weights in v1, same output", "chapters exercise-3-1"}});
  table("Natural Language Processing with Transformers, chapter 3 (seed 004)",
        {{"encoder", "the encoder, piece by piece", "encoder"}});
  std::cout << "Pictures (SVG files a browser shows): tour --svg FILE, attention --svg FILE, encoder --svg FILE,\n"
               "  gpt2 --model DIR --prompt TEXT --svg FILE, bert --model DIR ... --svg FILE (attention heads),\n"
               "  train_char_gpt --plot FILE, train_sentiment --plot FILE (loss and accuracy curves)\n";
}

}  // namespace

int main(int argc, char** argv) {
  const auto option = examples::parse_svg_option(argc, argv, "tour");
  if (option.exit_status) return *option.exit_status;
  const auto& svg_file = option.file;
  std::optional<svg::Figure> pictures;
  if (svg_file) figure = &pictures.emplace("eigenformer tour: attention weights", 3);

  std::cout << "eigenformer tour: the tutorials' worked examples, reproduced digit for digit\n";
  self_attention_by_hand();
  softmax_examples();
  causal_mask();
  where_the_chapters_live();
  if (svg_file) return examples::save_svg("tour", *svg_file, [&] { pictures->save(*svg_file); });
  return 0;
}
