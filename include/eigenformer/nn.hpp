// The layers module: every layer of the tutorials with its forward and backward pass.
#pragma once

#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/nn/positional_encoding.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/dropout.hpp"
