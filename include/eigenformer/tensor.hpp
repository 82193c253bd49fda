// The tensor module: Tensor<T, Rank> and every operation on it.
#pragma once

#include "eigenformer/tensor/error.hpp"
#include "eigenformer/tensor/shape.hpp"
#include "eigenformer/tensor/storage.hpp"
#include "eigenformer/tensor/tensor.hpp"
#include "eigenformer/tensor/creation.hpp"
#include "eigenformer/tensor/elementwise.hpp"
#include "eigenformer/tensor/reduce.hpp"
#include "eigenformer/tensor/matmul.hpp"
#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/bf16.hpp"
#include "eigenformer/tensor/packed_matrix.hpp"
#include "eigenformer/tensor/join.hpp"
#include "eigenformer/tensor/eigen_interop.hpp"
#include "eigenformer/tensor/print.hpp"
