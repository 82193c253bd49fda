// eigenformer: header-only tensors and Transformer layers on Eigen. Including this header brings in
// the tensor, random, nn and io (checkpoint) modules; each module header (eigenformer/tensor.hpp,
// eigenformer/random.hpp, eigenformer/nn.hpp, eigenformer/io.hpp) also stands alone.
#pragma once

#include "eigenformer/tensor.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/nn.hpp"
#include "eigenformer/io.hpp"
#include "eigenformer/models.hpp"
#include "eigenformer/train.hpp"
