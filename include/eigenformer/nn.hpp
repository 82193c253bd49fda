// The layers module: the module tree base and every layer with its forward and backward pass. Losses,
// optimizers and schedules are training tools and live in eigenformer/train.hpp.
#pragma once

#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/nn/module_list.hpp"
#include "eigenformer/nn/positional_encoding.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/conv1d.hpp"
#include "eigenformer/nn/pack_weights.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/activation.hpp"
#include "eigenformer/nn/layernorm.hpp"
#include "eigenformer/nn/embedding.hpp"
#include "eigenformer/nn/feedforward.hpp"
#include "eigenformer/nn/sequential.hpp"
#include "eigenformer/nn/attention.hpp"
#include "eigenformer/nn/multi_head_attention.hpp"
#include "eigenformer/nn/transformer_block.hpp"
// The books' attention layers (nn::tutorial, in nn/tutorial/), through their umbrella header.
#include "eigenformer/nn/self_attention.hpp"
