// The construction tag of every model: `GPT2LMHeadModel<float>(config, models::no_init)` builds the module
// tree with all weights zero (LayerNorm 1 / 0) and draws nothing, for a model whose weights are loaded next.
// Drawing a full initialisation only to overwrite it costs seconds for a BERT-base or GPT-2 sized model.
#pragma once

namespace eigenformer::models {

struct no_init_t {
  explicit no_init_t() = default;
};
inline constexpr no_init_t no_init{};

}  // namespace eigenformer::models
