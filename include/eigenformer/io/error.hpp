// The exception of eigenformer::io. Every message starts with the file (or "state dict") it is about and
// names the tensor, with shapes and dtypes where they matter, so a bad checkpoint says what is wrong where:
//   model.safetensors: tensor "h.0.attn.c_attn.weight": data_offsets [0, 9437184) exceed the data size 4096
#pragma once

#include <stdexcept>

namespace eigenformer::io {

// A checkpoint that cannot be read or written: malformed or truncated files, missing or unexpected tensors,
// shape or dtype mismatches, I/O failures. A runtime_error, since the cause is the data, not the program.
class checkpoint_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace eigenformer::io
