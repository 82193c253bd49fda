// Waiting for a forked child with a deadline, for the tests that fork (the thread pool's and the allocator's
// fork handlers): a child that hangs is killed and reported instead of hanging the suite.
#pragma once

#if defined(__unix__) || defined(__APPLE__)
#include <chrono>
#include <csignal>
#include <optional>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace eftest {

// The child's wait status once it ends within `timeout`; nothing (and the child killed and reaped) otherwise.
inline std::optional<int> wait_for_child(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return std::nullopt;
}

}  // namespace eftest
#endif
