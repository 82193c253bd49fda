// eigenformer: header-only tensors and Transformer layers on Eigen. Including this header brings in
// the tensor, random and nn modules; each module header (eigenformer/tensor.hpp, eigenformer/random.hpp,
// eigenformer/nn.hpp) also stands alone.
#pragma once

#include "eigenformer/tensor.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/nn.hpp"
