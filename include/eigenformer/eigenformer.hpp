// eigenformer: header-only tensors and Transformer layers on Eigen. This core header brings in tensors
// (eigenformer/tensor.hpp, with the compute backend), the PyTorch-exact random streams (random.hpp) and the
// layers (nn.hpp), and nothing that parses files: its only dependency is Eigen.
//
// The rest is opt-in, one header each, so a program that only needs layers does not compile a JSON parser:
//   eigenformer/io.hpp          safetensors checkpoints and state dicts (nlohmann/json)
//   eigenformer/train.hpp       losses, optimizers, schedules
//   eigenformer/models.hpp      GPT-2 (and its Hugging Face loader), generation
//   eigenformer/tokenizers.hpp  GPT-2 BPE, WordPiece, pipelines (utf8proc; target eigenformer::tokenizers)
#pragma once

#include "eigenformer/tensor.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/nn.hpp"
