// eigenformer: header-only tensors and Transformer layers on Eigen. Including this header brings in
// everything; the module headers (eigenformer/tensor.hpp, eigenformer/random.hpp, ...) stand alone.
#pragma once

#include "eigenformer/tensor.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/positional_encoding.hpp"
