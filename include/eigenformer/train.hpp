// eigenformer/train: losses (MSELoss, CrossEntropyLoss), optimizers (AdamW, SGD, clip_grad_norm) and
// learning-rate schedules.
#pragma once

#include "eigenformer/train/losses.hpp"
#include "eigenformer/train/optimizers.hpp"
#include "eigenformer/train/schedules.hpp"
