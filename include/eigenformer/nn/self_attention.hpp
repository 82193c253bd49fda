// The tutorial attention layers, kept apart from the library's core (nn/attention.hpp,
// nn/multi_head_attention.hpp) in nn/tutorial/: they reproduce the books' modules name for name and number
// for number, and all run on the core's attention kernel.
//
//   nn/tutorial/self_attention.hpp       nn::tutorial::SelfAttentionV1, SelfAttentionV2, CausalAttention
//                                        (LLMs from scratch, chapter 3)
//   nn/tutorial/per_head_attention.hpp   nn::tutorial::MultiHeadAttentionPerHead (seed 004's AttentionHead
//                                        modules over nn::MultiHeadAttention's fused projection)
#pragma once

#include "eigenformer/nn/tutorial/per_head_attention.hpp"
#include "eigenformer/nn/tutorial/self_attention.hpp"
