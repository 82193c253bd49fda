// The checkpoint module: safetensors files and module state dicts (needs nlohmann/json, a dependency of
// eigenformer::eigenformer).
#pragma once

#include "eigenformer/io/error.hpp"
#include "eigenformer/io/safetensors.hpp"
#include "eigenformer/io/state_dict.hpp"
