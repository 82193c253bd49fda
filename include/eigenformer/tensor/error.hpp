// Exceptions thrown by eigenformer. Every message names the operation and the offending shapes or values,
// so a failure deep inside a model still says what went wrong where.
#pragma once

#include <stdexcept>
#include <string>

namespace eigenformer {

// Raised when operand shapes do not fit an operation (mismatched matmul dimensions, shapes that do not
// broadcast, a dim out of range). Derived from std::invalid_argument so generic handlers still catch it.
class shape_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace eigenformer
