// For the suites whose cases name their thread count (BM_bert_forward/8/128/2): the count is set for one
// benchmark and the process setting restored after it, so one run of a binary compares 1 and 2 threads.
#pragma once

#include <cstdint>
#include <eigenformer/tensor/backend.hpp>

namespace bench {

struct Threads {
  int saved = eigenformer::get_num_threads();
  explicit Threads(std::int64_t n) { eigenformer::set_num_threads(static_cast<int>(n)); }
  ~Threads() { eigenformer::set_num_threads(saved); }
};

}  // namespace bench
