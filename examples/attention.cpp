// Attention, step by step, as the tutorials teach it, on their own built-in inputs and seeds. Every tensor
// prints the way PyTorch prints it, so the output reads side by side with the books.
//
//   1. BERT from scratch §1.9-1.12 (listings 1.2-1.8): queries, keys, values, scores, scaling, softmax,
//      context vectors for "The next day is bright", then the same in one call.
//   2. §1.13 (listings 1.9-1.12): the causal mask, applied before the softmax.
//   3. §1.14 (listing 1.13): dropout on the causal attention weights.
//   4. §1.16 (listings 1.14-1.19): multi-head attention by splitting one projection into heads.
//   5. §1.17-1.19 and listings 1.31/1.33: the MultiHeadAttention module with a padding mask, and the
//      Transformer block around it (LayerNorm, feed-forward, shortcut connections).
//   6. LLMs from scratch, chapter 3: SelfAttention_v1, SelfAttention_v2 and CausalAttention.
//
// Usage: attention [--svg FILE]
//   --svg FILE  also draws what the sections compute, as one SVG picture: the attention weights of "The next
//               day is bright" (section 1) and their causal version (section 2) with the words on both axes,
//               the module's three heads on the padded sequence (section 5), and the sinusoidal position
//               encoding of BERT from scratch §1.5 as a heatmap and as the curves of figure 1.33
//               (d_model 768, 1024 positions, dimension pairs i = 1, 50, 150, 250)
//
// Build and run: cmake --preset release && cmake --build --preset release --target attention
//                build/release/examples/attention --svg attention.svg
#include <eigenformer/io/svg.hpp>
#include <eigenformer/nn/attention.hpp>
#include <eigenformer/nn/dropout.hpp>
#include <eigenformer/nn/multi_head_attention.hpp>
#include <eigenformer/nn/positional_encoding.hpp>
#include <eigenformer/nn/self_attention.hpp>
#include <eigenformer/nn/transformer_block.hpp>

#include "svg_option.hpp"

#include <exception>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace ef = eigenformer;
namespace nn = ef::nn;
namespace svg = ef::io::svg;

namespace {

// The pictures of --svg; null without it.
svg::Figure* figure = nullptr;

const std::vector<std::string> next_day_words = {"The", "next", "day", "is", "bright"};

void heading(const char* title) { std::cout << "\n== " << title << " ==\n"; }

// print(t.shape) in PyTorch's words.
template <class T>
std::string size(const T& t) {
  return "torch.Size(" + ef::shape_string(t.shape()) + ")";
}

// "The next day is bright": one 8-dimensional embedding per word (BERT from scratch §1.9).
ef::Tensor<float, 2> next_day_inputs() {
  return ef::tensor<float>({{0.32f, 0.21f, 0.43f, 0.21f, 0.86f, 0.67f, 0.98f, 0.23f},    // The
                            {0.43f, 0.56f, 0.43f, 0.56f, 0.69f, 0.21f, 0.56f, 0.21f},    // next
                            {0.56f, 0.21f, 0.43f, 0.21f, 0.54f, 0.12f, 0.89f, 0.98f},    // day
                            {0.87f, 0.34f, 0.18f, 0.32f, 0.75f, 0.12f, 0.54f, 0.92f},    // is
                            {0.76f, 0.21f, 0.85f, 0.34f, 0.98f, 0.23f, 0.68f, 0.34f}});  // bright
}

void self_attention_step_by_step() {
  heading("1. Self-attention step by step (BERT from scratch listings 1.2-1.8)");
  const auto inputs = next_day_inputs();
  const auto x_2 = inputs.select(0, 1);  // embedding for "next"
  const ef::index_t d_in = inputs.size(1), d_out = 4;
  std::cout << x_2 << "\n" << d_in << "\n" << d_out << "\n";

  ef::manual_seed(123);
  const auto W_query = ef::randn({d_in, d_out});
  const auto W_key = ef::randn({d_in, d_out});
  const auto W_value = ef::randn({d_in, d_out});
  std::cout << "W_query:\n" << W_query << "\n";

  const auto queries = ef::matmul(inputs, W_query);  // (5, 4)
  const auto keys = ef::matmul(inputs, W_key);       // (5, 4)
  const auto values = ef::matmul(inputs, W_value);   // (5, 4)
  std::cout << "queries.shape: " << size(queries) << "\n";
  std::cout << "queries:\n" << queries << "\n";

  const auto attn_scores = ef::matmul(queries, keys.t());  // (5, 5): keys.T is a view, read in place
  std::cout << "Attention scores matrix:\n" << attn_scores << "\n";
  std::cout << "Attention scores for 'next':\n" << ef::matmul(queries.select(0, 1), keys.t()) << "\n";

  // Dividing by sqrt(d_k) keeps the softmax away from saturation (§1.12).
  const double d_k = static_cast<double>(keys.size(-1));
  const auto attn_weights = ef::softmax(attn_scores / std::sqrt(d_k), -1);
  std::cout << "Attention weights matrix:\n" << attn_weights << "\n";
  std::cout << "Row sums: " << ef::sum(attn_weights, -1) << "\n";

  const auto context = ef::matmul(attn_weights, values);  // (5, 4)
  std::cout << "Context vectors:\n" << context << "\n";
  std::cout << "context.shape: " << size(context) << "\n";

  // The same computation in one call, and the weights it used (for plotting, say).
  ef::Tensor<float, 2> weights;
  const auto context2 = nn::scaled_dot_product_attention(queries, keys, values, std::nullopt, nn::AttentionOptions{},
                                                         nullptr, &weights);
  std::cout << "scaled_dot_product_attention(queries, keys, values):\n" << context2 << "\n";
  if (figure)
    figure->add(svg::heatmap(weights, {.title = "1. Attention weights (rows: queries, columns: keys)",
                                       .row_labels = next_day_words,
                                       .col_labels = next_day_words,
                                       .vmin = 0,
                                       .annotate = true}));
}

void causal_attention() {
  heading("2. Causal attention: mask before the softmax (listings 1.9-1.12)");
  const auto A = ef::tensor<float>({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}});
  std::cout << "torch.tril(A):\n" << ef::tril(A) << "\n";
  const ef::index_t seq_len = 5;
  const auto causal_mask = ef::tril(ef::ones<bool>({seq_len, seq_len}));
  std::cout << "Causal mask (True = allowed, False = masked):\n" << causal_mask << "\n";

  // Listing 1.11's scaled scores (row i: 0.5 + 0.25 i + 0.5 j).
  auto scaled_scores = ef::zeros<float>({seq_len, seq_len});
  for (ef::index_t i = 0; i < seq_len; ++i)
    for (ef::index_t j = 0; j < seq_len; ++j) scaled_scores(i, j) = 0.5f + 0.25f * i + 0.5f * j;
  const auto masked = ef::masked_fill(scaled_scores, ~causal_mask, -std::numeric_limits<double>::infinity());
  std::cout << "Scaled scores with causal mask:\n" << masked << "\n";
  const auto attn_weights_causal = ef::softmax(masked, -1);  // exp(-inf) = 0: no leak from the future
  std::cout << "Causal attention weights:\n" << attn_weights_causal << "\n";
  std::cout << "Row sums: " << ef::sum(attn_weights_causal, -1) << "\n";

  // In the attention function: is_causal = true masks key j > query i the same way.
  const auto q = next_day_inputs(), k = next_day_inputs();
  ef::Tensor<float, 2> w;
  nn::AttentionOptions causal;
  causal.is_causal = true;
  nn::scaled_dot_product_attention(q, k, q, std::nullopt, causal, nullptr, &w);
  std::cout << "scaled_dot_product_attention(..., is_causal=true) weights:\n" << w << "\n";
  if (figure)
    figure->add(svg::heatmap(w, {.title = "2. Causal attention weights (no key after its query)",
                                 .row_labels = next_day_words,
                                 .col_labels = next_day_words,
                                 .vmin = 0,
                                 .annotate = true}));
}

void causal_dropout() {
  heading("3. Dropout on the causal attention weights (listing 1.13)");
  // The weights of listing 1.12 again.
  auto scores = ef::zeros<float>({5, 5});
  for (ef::index_t i = 0; i < 5; ++i)
    for (ef::index_t j = 0; j < 5; ++j) scores(i, j) = 0.5f + 0.25f * i + 0.5f * j;
  const auto attn_weights_causal =
      ef::softmax(ef::masked_fill(scores, ~ef::tril(ef::ones<bool>({5, 5})), -std::numeric_limits<double>::infinity()), -1);
  nn::Dropout<float> dropout(0.5);
  ef::manual_seed(0);  // to get a stable example mask
  const auto dropped = dropout.forward(attn_weights_causal);
  std::cout << "Causal attention weights before dropout:\n" << attn_weights_causal << "\n";
  // Debian's PyTorch (no MKL) prints these digits; pip wheels draw the mask from MKL's own generator.
  std::cout << "Causal attention weights after dropout (training mode):\n" << dropped << "\n";
  std::cout << "Row sums after dropout:\n" << ef::sum(dropped, -1) << "\n";
}

void multi_head_split() {
  heading("4. Multi-head attention by splitting heads (listings 1.14-1.19)");
  ef::manual_seed(123);
  ef::set_printoptions(3, false);  // the seed's precision=3 without scientific notation
  const auto x = ef::tensor<float>({{{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f},     // "The"
                                     {6.0f, 5.0f, 4.0f, 3.0f, 2.0f, 1.0f},     // "kid"
                                     {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}}});  // "smiles"
  std::cout << "x.shape: " << size(x) << "\n";
  const ef::index_t b = 1, num_tokens = 3, d_out = 6, num_heads = 2, head_dim = d_out / num_heads;
  const auto W_q = ef::randn({6, d_out}), W_k = ef::randn({6, d_out}), W_v = ef::randn({6, d_out});
  // (1, 3, 6) -> view (1, 3, 2, 3) -> transpose (1, 2, 3, 3): every step is a view, nothing is copied.
  const ef::Shape<4> split{b, num_tokens, num_heads, head_dim};
  const auto q = ef::matmul(x, W_q).view(split).transpose(1, 2);
  const auto k = ef::matmul(x, W_k).view(split).transpose(1, 2);
  const auto v = ef::matmul(x, W_v).view(split).transpose(1, 2);
  std::cout << "q after transpose: " << size(q) << "\n";

  const auto scores = ef::matmul(q, k.transpose(-1, -2));  // (b, num_heads, num_tokens, num_tokens)
  std::cout << "scores.shape: " << size(scores) << "\n";
  const auto weights = ef::softmax(scores / std::sqrt(static_cast<double>(head_dim)), -1);
  std::cout << "weights[0, 0]:\n" << weights.select(0, 0).select(0, 0) << "\n";
  const auto context = ef::matmul(weights, v);  // (b, num_heads, num_tokens, head_dim)
  std::cout << "context[0, 0]:\n" << context.select(0, 0).select(0, 0) << "\n";
  const auto final_context = context.transpose(1, 2).reshape(ef::Shape<3>{b, num_tokens, num_heads * head_dim});
  std::cout << "final context.shape: " << size(final_context) << "\n";
  std::cout << "final context:\n" << final_context << "\n";
  ef::reset_printoptions();
}

void modules() {
  heading("5. The MultiHeadAttention module and the Transformer block (listings 1.31, 1.33)");
  ef::manual_seed(0);
  const ef::index_t B = 2, T = 5, C = 12;
  const auto x = ef::randn({B, T, C});
  // (ids != PAD): the second sequence has two padding tokens.
  const auto mask = ef::tensor<bool>({{true, true, true, true, true}, {true, true, true, false, false}});

  nn::MultiHeadAttention<float> attn(C, 3, 0.1);  // the seed's MultiHeadSelfAttention(dim, heads, dropout)
  for (auto& p : attn.named_parameters()) std::cout << p.name << " " << ef::shape_string(p.shape) << "\n";
  attn.eval();
  const auto [out, weights] = attn.forward_with_weights(x, mask);
  std::cout << "out.shape: " << size(out) << ", weights.shape: " << size(weights) << "\n";
  std::cout << "head 0 weights of the padded sequence (padding gets 0):\n" << weights.select(0, 1).select(0, 0) << "\n";
  if (figure) {
    const std::vector<std::string> tokens = {"x0", "x1", "x2", "[PAD]", "[PAD]"};
    figure->new_row();
    for (ef::index_t h = 0; h < weights.size(1); ++h)
      figure->add(svg::heatmap(weights.select(0, 1).select(0, h),
                               {.title = "5. Module, padded sequence, head " + std::to_string(h),
                                .row_labels = tokens,
                                .col_labels = tokens,
                                .vmin = 0,
                                .vmax = 1}));
  }

  // Training: forward saves what backward needs; backward accumulates the parameters' gradients.
  attn.train();
  attn.forward(x, mask);
  const auto dx = attn.backward(ef::ones<float>({B, T, C}));
  std::cout << "dx.shape: " << size(dx) << ", |d qkv.weight| sum: " << ef::sum(ef::abs(attn.qkv.weight.grad())) << "\n";

  nn::TransformerBlock<float> block(C, 3, 4 * C, 0.1);  // pre-LN: x + attn(norm1(x)), then + ff(norm2(x))
  block.eval();
  std::cout << "pre-LN block output[1, 0]:\n" << block.forward(x, mask).select(0, 1).select(0, 0) << "\n";
  nn::TransformerBlock<float> post(C, 3, 4 * C, {.norm = nn::NormPosition::post, .dropout = 0.1});
  post.eval();
  const auto y = post.forward(x, mask);
  std::cout << "post-LN block: every token is normalised, mean " << ef::mean(y.select(0, 1).select(0, 0)) << "\n";
}

void llms_from_scratch() {
  heading("6. LLMs from scratch, chapter 3: SelfAttention_v1, SelfAttention_v2, CausalAttention");
  // "Your journey starts with one step"
  const auto inputs = ef::tensor<float>({{0.43f, 0.15f, 0.89f}, {0.55f, 0.87f, 0.66f}, {0.57f, 0.85f, 0.64f},
                                         {0.22f, 0.58f, 0.33f}, {0.77f, 0.25f, 0.10f}, {0.05f, 0.80f, 0.55f}});
  const ef::index_t d_in = 3, d_out = 2;

  ef::manual_seed(123);
  nn::tutorial::SelfAttentionV1<float> sa_v1(d_in, d_out);  // W = rand(d_in, d_out) x 3
  std::cout << sa_v1.forward(inputs) << "\n";

  ef::manual_seed(789);
  nn::tutorial::SelfAttentionV2<float> sa_v2(d_in, d_out);  // nn.Linear(d_in, d_out, bias=False) x 3
  std::cout << sa_v2.forward(inputs) << "\n";

  const auto batch = ef::stack(std::vector<ef::Tensor<float, 2>>{inputs, inputs});  // (2, 6, 3)
  std::cout << size(batch) << "\n";
  ef::manual_seed(123);
  const ef::index_t context_length = batch.size(1);
  nn::tutorial::CausalAttention<float> ca(d_in, d_out, context_length, 0.0);
  const auto context_vecs = ca.forward(batch);
  std::cout << "context_vecs.shape: " << size(context_vecs) << "\n" << context_vecs << "\n";
}

// BERT from scratch §1.5: the sinusoidal table as a heatmap (the first positions and dimensions, where the
// waves are visible) and figure 1.33's curves: PE(pos, 2i) = sin(pos / 10000^(2i/768)) and
// PE(pos, 2i+1) = cos(...) for four dimension pairs i over 1024 positions.
void positional_encoding_pictures(svg::Figure& fig) {
  const ef::index_t d_model = 768, positions = 1024;
  const auto pe = nn::sinusoidal_positional_encoding<float>(positions, d_model);
  fig.new_row();
  fig.add(svg::heatmap(pe.narrow(0, 0, 100).narrow(1, 0, 128),
                       {.title = "Sinusoidal position encoding, d_model 768: positions 0-99, dimensions 0-127",
                        .x_label = "dimension",
                        .y_label = "position",
                        .colormap = svg::Colormap::diverging,
                        .vmin = -1,
                        .vmax = 1,
                        .tooltips = false}));
  fig.new_row();
  for (const ef::index_t i : {1, 50, 150, 250}) {
    svg::Series sine{.name = "sin (dimension " + std::to_string(2 * i) + ")", .color = "#2ca02c"};
    svg::Series cosine{.name = "cos (dimension " + std::to_string(2 * i + 1) + ")", .color = "#1f77b4"};
    for (ef::index_t p = 0; p < positions; ++p) {
      sine.x.push_back(static_cast<double>(p)), sine.y.push_back(pe(p, 2 * i));
      cosine.x.push_back(static_cast<double>(p)), cosine.y.push_back(pe(p, 2 * i + 1));
    }
    fig.add(svg::LineChart{.title = "Figure 1.33: i = " + std::to_string(i),
                           .x_label = "position",
                           .y_label = "encoding",
                           .series = {sine, cosine},
                           .ymin = -1.1,
                           .ymax = 1.1,
                           .width = 420,
                           .height = 180});
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto option = examples::parse_svg_option(argc, argv, "attention");
  if (option.exit_status) return *option.exit_status;
  const auto& svg_file = option.file;
  std::optional<svg::Figure> pictures;
  if (svg_file) figure = &pictures.emplace("Attention, step by step", 3);

  std::cout << "eigenformer: attention, step by step\n";
  self_attention_step_by_step();
  causal_attention();
  causal_dropout();
  multi_head_split();
  modules();
  llms_from_scratch();
  if (svg_file)
    return examples::save_svg("attention", *svg_file, [&] {
      positional_encoding_pictures(*pictures);
      pictures->save(*svg_file);
    });
  return 0;
}
