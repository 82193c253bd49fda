// The Transformer encoder, built up piece by piece on the sentence "time flies like an arrow", following the
// encoder half of the Transformer-anatomy chapter of "Natural Language Processing with Transformers"
// (seed 004). Every piece is the library's own; the weights are random but bert-base-uncased-shaped
// (vocabulary 30522, hidden size 768, 12 heads, feed-forward width 3072, 512 positions, 12 layers) and drawn
// after eigenformer::manual_seed, so the program prints the same numbers on every run.
//
//   1. Token ids: the bert-base-uncased WordPiece ids of the sentence, without [CLS] and [SEP].
//   2. Token embeddings: an nn::Embedding lookup table, (1, 5) ids -> (1, 5, 768) vectors.
//   3. Scaled dot-product attention with query = key = value = the embeddings: scores, softmax weights
//      whose rows sum to 1, and the weighted averages; then the same in one library call.
//   4. Multi-head attention: twelve 64-wide heads, each with its own query/key/value projections, their
//      outputs side by side and mixed by an output projection.
//   5. The position-wise feed-forward network (768 -> 3072 -> GELU -> 768).
//   6. A pre-LN encoder layer (LayerNorm before each sublayer, residual around it), and why it cannot tell
//      word order apart.
//   7. Learned position embeddings added to the token embeddings, which fixes that.
//   8. The full 12-layer encoder and a 3-class classification head on the first token (BertModel and
//      BertForSequenceClassification with pre_layer_norm).
//
// Every module runs in eval mode: dropout is the identity, so the numbers are reproducible. The chapter runs
// its modules in training mode (dropout on) and only looks at shapes, which are the same either way.
//
// If EIGENFORMER_DATA_DIR is set and $EIGENFORMER_DATA_DIR/bert-base-uncased/vocab.txt exists (and the
// tokenizers were built), the ids come from tokenizers::BertTokenizer; otherwise from a built-in list.
//
// Usage: encoder [--svg FILE]
//   --svg FILE  also draws the attention weights the steps compute, as one SVG picture, the tokens on both
//               axes (rows the queries, columns the keys): step 3's weights, step 4's twelve heads, the
//               position embeddings of step 7 at the sentence's five positions (dimensions 0-47; random, so
//               no pattern yet), and the head view of step 8's encoder, a row of twelve heads per layer
//
// Build and run: cmake --preset release && cmake --build build/release --target encoder
//                build/release/examples/encoder --svg encoder.svg
#include <eigenformer/io/svg.hpp>
#include <eigenformer/models/bert.hpp>
#include <eigenformer/nn/attention.hpp>
#include <eigenformer/nn/embedding.hpp>
#include <eigenformer/nn/feedforward.hpp>
#include <eigenformer/nn/layernorm.hpp>
#include <eigenformer/nn/transformer_block.hpp>
#include <eigenformer/nn/tutorial/per_head_attention.hpp>
#include <eigenformer/random.hpp>
#include <eigenformer/tensor.hpp>

#include "svg_option.hpp"

#ifdef EIGENFORMER_EXAMPLE_HAS_TOKENIZERS
#include <eigenformer/tokenizers/wordpiece.hpp>
#endif

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace ef = eigenformer;
namespace nn = ef::nn;
namespace svg = ef::io::svg;

namespace {

const char* const kText = "time flies like an arrow";

void heading(const char* title) { std::cout << "\n== " << title << " ==\n"; }

// What PyTorch prints for t.size().
template <class T, std::size_t R>
std::string size(const ef::Tensor<T, R>& t) {
  return "torch.Size(" + ef::shape_string(t.shape()) + ")";
}

// The largest |a - b| over two tensors of one shape.
template <std::size_t R>
float max_abs_diff(const ef::Tensor<float, R>& a, const ef::Tensor<float, R>& b) {
  return ef::max(ef::abs(a - b)).item();
}

// The largest |a[0, i, :] - b[0, T-1-i, :]|: zero when b is a with its tokens in reverse order.
float max_abs_diff_reversed(const ef::Tensor<float, 3>& a, const ef::Tensor<float, 3>& b) {
  const ef::index_t t = a.size(1);
  float worst = 0.0f;
  for (ef::index_t i = 0; i < t; ++i)
    worst = std::max(worst, max_abs_diff(a.select(1, i), b.select(1, t - 1 - i)));
  return worst;
}

ef::Tensor<std::int64_t, 2> as_batch(const std::vector<std::int64_t>& ids) {
  auto t = ef::Tensor<std::int64_t, 2>::empty({1, static_cast<ef::index_t>(ids.size())});
  for (std::size_t i = 0; i < ids.size(); ++i) t(0, static_cast<ef::index_t>(i)) = ids[i];
  return t;
}

// The sentence's ids: from the real vocabulary when one is available, else the ids that vocabulary gives.
// `tokens` receives their spellings, for the pictures' axes.
std::vector<std::int64_t> token_ids(std::vector<std::string>& tokens) {
#ifdef EIGENFORMER_EXAMPLE_HAS_TOKENIZERS
  if (const char* dir = std::getenv("EIGENFORMER_DATA_DIR")) {
    const auto vocab = std::filesystem::path(dir) / "bert-base-uncased" / "vocab.txt";
    if (std::filesystem::exists(vocab)) {
      try {
        const auto tok = ef::tokenizers::BertTokenizer::from_file(vocab);
        std::cout << "Tokenized with the WordPiece vocabulary " << vocab.string() << " (no [CLS]/[SEP]):\n";
        std::cout << "tokens: [";
        const auto pieces = tok.tokenize(kText);
        for (std::size_t i = 0; i < pieces.size(); ++i) std::cout << (i ? ", '" : "'") << pieces[i] << "'";
        std::cout << "]\n";
        tokens = pieces;
        return tok.encode(kText);
      } catch (const std::exception& e) {
        std::cout << "Could not use " << vocab.string() << ": " << e.what() << "\n";
      }
    }
  }
#endif
  std::cout << "Built-in ids: what bert-base-uncased's tokenizer gives for the sentence without [CLS]/[SEP]\n"
               "(set EIGENFORMER_DATA_DIR to a directory holding bert-base-uncased/vocab.txt to tokenize here):\n";
  tokens = {"time", "flies", "like", "an", "arrow"};
  return {2051, 10029, 2066, 2019, 8612};
}

}  // namespace

int main(int argc, char** argv) {
  const auto option = examples::parse_svg_option(argc, argv, "encoder");
  if (option.exit_status) return *option.exit_status;
  const auto& svg_file = option.file;
  // The pictures of --svg, a row per step: as wide as a row of twelve heads.
  std::optional<svg::Figure> pictures;
  if (svg_file) pictures.emplace(std::string("The encoder on \"") + kText + "\", random bert-base-uncased-shaped weights", 12);

  std::cout << "eigenformer: the Transformer encoder, piece by piece, on random bert-base-uncased-shaped weights\n";
  ef::manual_seed(42);
  auto config = ef::models::BertConfig::bert_base_uncased();
  std::cout << "config: vocab_size=" << config.vocab_size << ", hidden_size=" << config.hidden_size
            << ", num_attention_heads=" << config.num_attention_heads
            << ", intermediate_size=" << config.intermediate_size
            << ", max_position_embeddings=" << config.max_position_embeddings
            << ", num_hidden_layers=" << config.num_hidden_layers << "\n";

  heading("1. Token ids");
  std::cout << "text: \"" << kText << "\"\n";
  std::vector<std::string> tokens;
  const auto ids = token_ids(tokens);
  const auto input_ids = as_batch(ids);  // (1, 5)
  std::cout << "input_ids: " << input_ids << "\n";
  // The same sentence backwards, for the word-order checks of steps 6 and 7.
  const auto reversed_ids = as_batch({ids.rbegin(), ids.rend()});

  heading("2. Token embeddings: one learned 768-d vector per vocabulary entry, looked up by id");
  nn::Embedding<float> token_emb(config.vocab_size, config.hidden_size);  // N(0, 1) rows, like torch's default
  std::cout << token_emb << "\n";
  const auto inputs_embeds = token_emb.forward(input_ids);  // (1, 5, 768)
  std::cout << "inputs_embeds.size(): " << size(inputs_embeds) << "   (batch, tokens, hidden)\n";
  std::cout << "These vectors ignore context: 'flies' gets the same vector whatever surrounds it.\n";

  heading("3. Scaled dot-product attention, with query = key = value = the embeddings");
  const auto& query = inputs_embeds;
  const auto& key = inputs_embeds;
  const auto& value = inputs_embeds;
  const double dim_k = static_cast<double>(key.size(-1));
  // Batched q k^T: one 5x5 table of dot products per sequence, divided by sqrt(768) to keep the softmax
  // out of saturation.
  const auto scores = ef::matmul(query, key.transpose(1, 2)) / std::sqrt(dim_k);  // (1, 5, 5)
  std::cout << "scores.size(): " << size(scores) << "   (one score per query/key pair)\n";
  std::cout << "scores:\n" << scores << "\n";
  const auto weights = ef::softmax(scores, -1);  // (1, 5, 5)
  std::cout << "weights = softmax(scores, -1): each token attends almost only to itself, since a random\n"
               "768-d vector is far more similar to itself than to any other:\n"
            << weights << "\n";
  std::cout << "weights.sum(-1): " << ef::sum(weights, -1) << "   (every row is a probability distribution)\n";
  if (pictures)
    pictures->add(svg::heatmap(weights.select(0, 0), {.title = "3. q = k = v: weights",
                                                     .row_labels = tokens,
                                                     .col_labels = tokens,
                                                     .vmin = 0,
                                                     .cell_size = 24}));
  const auto attn_outputs = ef::matmul(weights, value);  // (1, 5, 768)
  std::cout << "attn_outputs.shape: " << size(attn_outputs) << "   (one weighted average of values per token)\n";
  std::cout << "attn_outputs:\n" << attn_outputs << "\n";
  const auto sdpa = nn::scaled_dot_product_attention(query, key, value);
  std::cout << "nn::scaled_dot_product_attention(query, key, value) does the same in one call; max |difference|: "
            << max_abs_diff(sdpa, attn_outputs) << "\n";

  heading("4. Multi-head attention: 12 heads of 768 / 12 = 64 features, each with its own q, k, v projections");
  const ef::index_t heads = config.num_attention_heads, head_dim = config.head_dim();
  nn::tutorial::MultiHeadAttentionPerHead<float> multihead_attn(config.hidden_size, heads, 0.1);
  multihead_attn.eval();
  std::cout << "Parameters of head 0 and of the output projection (heads 1-11 are like head 0):\n";
  for (auto& p : multihead_attn.named_parameters())
    if (p.name.rfind("heads.0.", 0) == 0 || p.name.rfind("output_linear.", 0) == 0)
      std::cout << "  " << p.name << " " << ef::shape_string(p.shape) << "\n";
  const auto [attn_output, head_weights] = multihead_attn.forward_with_weights(inputs_embeds);
  std::cout << "attn_output.size(): " << size(attn_output) << "   (same shape as the input)\n";
  std::cout << "attention weights of all heads: " << size(head_weights) << "   (batch, head, query, key)\n";
  std::cout << "head 8's weights (the learned projections spread attention beyond the token itself):\n"
            << head_weights.select(0, 0).select(0, 8) << "\n";
  if (pictures) {
    pictures->new_row();
    for (ef::index_t h = 0; h < heads; ++h)
      pictures->add(svg::heatmap(head_weights.select(0, 0).select(0, h), {.title = "4. head " + std::to_string(h),
                                                                         .row_labels = tokens,
                                                                         .col_labels = tokens,
                                                                         .vmin = 0,
                                                                         .cell_size = 24}));
  }
  // One head by hand: project to 64-d queries, keys and values with that head's rows of the projection,
  // attend, and get (1, 5, 64). The twelve heads side by side, through the output projection, are the layer.
  const auto& W = multihead_attn.qkv.weight.data;  // (3 * 768, 768): all heads' query rows, key rows, value rows
  const auto& b = multihead_attn.qkv.bias->data;   // (3 * 768)
  auto project = [&](ef::index_t row) {
    return ef::matmul(inputs_embeds, W.narrow(0, row, head_dim).t()) + b.narrow(0, row, head_dim);  // (1, 5, 64)
  };
  std::vector<ef::Tensor<float, 3>> head_outputs;
  for (ef::index_t h = 0; h < heads; ++h) {
    const ef::index_t c = config.hidden_size;
    head_outputs.push_back(nn::scaled_dot_product_attention(project(h * head_dim), project(c + h * head_dim),
                                                            project(2 * c + h * head_dim)));
  }
  std::cout << "one head's output: " << size(head_outputs[0]) << "\n";
  const auto concatenated = ef::cat(head_outputs, -1);  // (1, 5, 768)
  std::cout << "12 heads concatenated: " << size(concatenated)
            << "; through output_linear they give the layer's output, max |difference|: "
            << max_abs_diff(multihead_attn.out.forward(concatenated), attn_output) << "\n";

  heading("5. Feed-forward network: Linear(768 -> 3072), GELU, Linear(3072 -> 768), on each token separately");
  nn::FeedForward<float> feed_forward(config.hidden_size, config.intermediate_size, config.hidden_dropout_prob, "gelu");
  feed_forward.eval();
  std::cout << feed_forward << "\n";
  const auto ff_outputs = feed_forward.forward(attn_outputs);
  std::cout << "ff_outputs.size(): " << size(ff_outputs) << "\n";
  // Position-wise: a token's output depends on that token's vector only.
  std::cout << "token 2 alone gives the same row, max |difference|: "
            << max_abs_diff(feed_forward.forward(attn_outputs.narrow(1, 2, 1)), ff_outputs.narrow(1, 2, 1)) << "\n";

  heading("6. A pre-LN encoder layer: x + attention(LayerNorm(x)), then h + feed_forward(LayerNorm(h))");
  nn::TransformerBlock<float> encoder_layer(config.hidden_size, heads, config.intermediate_size,
                                            {.norm = nn::NormPosition::pre, .dropout = config.hidden_dropout_prob});
  encoder_layer.eval();
  const auto layer_out = encoder_layer.forward(inputs_embeds);
  std::cout << "(inputs_embeds.shape, encoder_layer(inputs_embeds).size()): (" << size(inputs_embeds) << ", "
            << size(layer_out) << ")\n";
  std::cout << "encoder_layer(inputs_embeds):\n" << layer_out << "\n";
  // Permutation equivariance: attention is a weighted sum over a set, so reversing the words only reverses
  // the outputs. Nothing tells the layer where a token stands.
  const auto layer_out_reversed = encoder_layer.forward(token_emb.forward(reversed_ids));
  std::cout << "words reversed -> outputs reversed (no notion of order), max |difference|: "
            << max_abs_diff_reversed(layer_out, layer_out_reversed) << "\n";

  heading("7. Position embeddings: a learned vector per position 0..511 added to each token, then LayerNorm");
  nn::LearnedPositionalEmbedding<float> position_embeddings(config.max_position_embeddings, config.hidden_size);
  nn::LayerNorm<float> layer_norm(config.hidden_size, config.layer_norm_eps);
  // token vectors + position vectors, normalised (the chapter's Embeddings module; its dropout is the
  // identity in eval mode, so it is left out).
  auto embeddings = [&](const ef::Tensor<std::int64_t, 2>& ids) {
    return layer_norm.forward(position_embeddings.forward(token_emb.forward(ids)));
  };
  const auto embedded = embeddings(input_ids);
  std::cout << position_embeddings << ", " << layer_norm << "\n";
  std::cout << "embedding_layer(input_ids).size(): " << size(embedded) << "\n";
  std::cout << "words reversed -> outputs now differ beyond reordering, max |difference|: "
            << max_abs_diff_reversed(encoder_layer.forward(embedded), encoder_layer.forward(embeddings(reversed_ids)))
            << "\n";
  if (pictures) {
    // The vectors added at the sentence's positions, a column each (as narrow as a head's panel); a trained
    // model's would show structure, these are N(0, 1).
    pictures->new_row();
    pictures->add(svg::heatmap(position_embeddings.weight().data.narrow(0, 0, input_ids.size(1)).narrow(1, 0, 48).t(),
                               {.title = "7. Positions (random)",
                                .x_label = "position",
                                .y_label = "dimension",
                                .colormap = svg::Colormap::diverging,
                                .cell_size = 6,
                                .tooltips = false}));
  }

  heading("8. The full encoder (12 pre-LN layers) with a classification head on the first token, 3 classes");
  config.pre_layer_norm = true;      // LayerNorm before each sublayer, as in step 6
  config.add_pooling_layer = false;  // classify the first token's final hidden state directly
  config.num_labels = 3;
  // Hugging Face's initialisation: N(0, 0.02) weights, zero biases. BertModel's embeddings also add a
  // segment (token type) vector, the same one for every token of a single sentence.
  ef::models::BertForSequenceClassification<float> encoder_classifier(config);
  encoder_classifier.eval();
  std::cout << "BertForSequenceClassification: " << encoder_classifier.num_parameters() << " parameters in "
            << encoder_classifier.bert.encoder.layer.size() << " layers\n";
  const auto encoded = encoder_classifier.bert.forward(input_ids, std::nullopt, std::nullopt, /*output_attentions=*/pictures.has_value());
  const auto& hidden = encoded.last_hidden_state;
  std::cout << "encoder(input_ids).size(): " << size(hidden) << "   (one contextual vector per token)\n";
  std::cout << "encoder(input_ids) (row 0, the first token's state, is what the classifier reads):\n" << hidden << "\n";
  const auto logits = encoder_classifier.forward(input_ids);
  std::cout << "encoder_classifier(input_ids).size(): " << size(logits) << "   (one unnormalised logit per class)\n";
  std::cout << "logits: " << logits << "\n";
  std::cout << "softmax(logits, -1): " << ef::softmax(logits, -1) << "\n";
  const auto best = ef::argmax(logits, -1)(0);
  std::cout << "predicted: " << config.label(best) << " (untrained weights: the choice means nothing yet)\n";
  if (svg_file)
    return examples::save_svg("encoder", *svg_file, [&] {
      // N(0, 0.02) weights make every score near 0: the heads of the untrained encoder attend almost uniformly.
      svg::add_attention(*pictures, encoded.attentions, tokens);
      pictures->save(*svg_file);
    });
  return 0;
}
