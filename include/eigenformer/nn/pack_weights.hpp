// Packs the weight of every fully connected layer of a model for inference (tensor/packed_matrix.hpp): the
// float products of many rows (a prompt, a batch of sentences) then read each weight in the packed
// kernel's order instead of copying it into that order on every call. Costs about the weights' memory again,
// or nothing with FloatWeights::release, which frees each float weight once it is packed (inference only);
// a snapshot, to be taken again after the weights change. The models' own pack_weights() also pack their
// tied output layers.
#pragma once

#include <algorithm>
#include <vector>

#include "eigenformer/nn/conv1d.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

// Every nn::Linear and nn::Conv1D in the module tree under `root`, root included, except those `skip`
// names (layers whose weights a parent packs together, such as BERT's query, key and value). Releasing, each
// freed weight goes back to the system before the next is packed (not to the allocator's cache), so that
// memory never holds much more than the float model.
inline void pack_weights(Module<float>& root, const std::vector<const Module<float>*>& skip = {},
                         FloatWeights floats = FloatWeights::keep) {
  root.apply([&skip, floats](Module<float>& m) {
    if (std::find(skip.begin(), skip.end(), &m) != skip.end()) return;
    if (auto* linear = dynamic_cast<Linear<float>*>(&m)) linear->pack_weights(floats);
    else if (auto* conv = dynamic_cast<Conv1D<float>*>(&m)) conv->pack_weights(floats);
    else return;
    if (floats == FloatWeights::release) release_cached_memory();
  });
}

// Undoes pack_weights for every nn::Linear and nn::Conv1D under `root`: drops each packed copy, and a weight
// held only packed gets its float values back from it first (bit for bit), so the model can be trained or
// saved again. The models' own unpack_weights() also restore their tied tables and side-by-side copies.
inline void unpack_weights(Module<float>& root) {
  root.apply([](Module<float>& m) {
    if (auto* linear = dynamic_cast<Linear<float>*>(&m)) linear->unpack_weights();
    else if (auto* conv = dynamic_cast<Conv1D<float>*>(&m)) conv->unpack_weights();
  });
}

}  // namespace eigenformer::nn
