// How many CPUs this process may use: the thread pool's default size (backend.hpp).
//
// Why not std::thread::hardware_concurrency(): it counts the machine's online CPUs, not the ones the process
// is allowed. Under `taskset -c 0`, Docker's `--cpuset-cpus` or a Kubernetes static CPU policy the affinity
// mask is smaller, and under Docker's `--cpus` or a Kubernetes CPU limit a cgroup quota caps the CPU time;
// a pool sized to the machine then runs more threads than it has CPUs, and its threads spin while they wait
// (backend.hpp, spin_duration), taking the CPU from the thread doing the work. BERT-base b1 s128 on 2 threads
// pinned to one CPU of an AMD Zen 5 VM took 192 ms against 122 on 1 thread; under a 1-CPU cgroup quota 161
// against 123 (bench/README.md, "Threads on fewer CPUs than the machine has"). OpenMP's runtimes (behind
// PyTorch) size their teams from the affinity mask too, and Go's and Java's runtimes also read the quota.
//
// Linux only; elsewhere hardware_concurrency() stands. The quota is read as Go's runtime reads it: the
// process's cgroup from /proc/self/cgroup, where its hierarchy is mounted from /proc/self/mountinfo, then the
// limit of that cgroup and of each ancestor below the mount (v2: cpu.max; v1: cpu.cfs_quota_us over
// cpu.cfs_period_us), the smallest one, rounded up to whole CPUs.
#pragma once

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace eigenformer::detail {

// The first line of a file, or nothing when it cannot be read.
inline std::optional<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// CPUs allowed by a cgroup v2 cpu.max line ("max 100000": no limit; "150000 100000": 1.5 CPUs).
inline std::optional<double> cgroup_v2_cpu_limit(std::string_view cpu_max) {
  std::istringstream in{std::string(cpu_max)};
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  try {
    const double q = std::stod(quota);
    return q > 0 ? std::optional<double>(q / period) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// CPUs allowed by cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (quota -1: no limit).
inline std::optional<double> cgroup_v1_cpu_limit(std::string_view quota_us, std::string_view period_us) {
  try {
    const double quota = std::stod(std::string(quota_us)), period = std::stod(std::string(period_us));
    return quota > 0 && period > 0 ? std::optional<double>(quota / period) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// mountinfo writes a space in a path as \040 (and tab, newline, backslash likewise in octal).
inline std::string unescape_mountinfo(std::string_view s) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The CPU limit of this process's cgroup and its ancestors, in CPUs, or nothing when there is none (or no
// cgroup file system). `root` prefixes every path read, for tests with a made-up /proc and /sys.
inline std::optional<double> cgroup_cpu_limit(const std::string& root = "") {
  std::ifstream cgroup_file(root + "/proc/self/cgroup");
  if (!cgroup_file) return std::nullopt;
  // "hierarchy:controllers:path"; v2 is "0::path", v1 the line whose controllers include "cpu".
  std::optional<std::string> v1_path, v2_path;
  for (std::string line; std::getline(cgroup_file, line);) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) v2_path = path;
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "cpu") v1_path = path;
  }
  // "id parent major:minor root mount_point options [optional fields] - fstype source super_options"
  std::ifstream mountinfo(root + "/proc/self/mountinfo");
  if (!mountinfo) return std::nullopt;
  struct Mount {
    std::string root, point;
  };
  std::optional<Mount> v1_mount, v2_mount;
  for (std::string line; std::getline(mountinfo, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, device, mount_root, point, fstype, source, options;
    if (!(head >> id >> parent >> device >> mount_root >> point) || !(tail >> fstype >> source >> options)) continue;
    const Mount m{unescape_mountinfo(mount_root), unescape_mountinfo(point)};
    if (fstype == "cgroup2") v2_mount = m;
    if (fstype == "cgroup") {
      std::istringstream list(options);
      for (std::string o; std::getline(list, o, ',');)
        if (o == "cpu") v1_mount = m;
    }
  }
  const bool v1 = v1_mount && v1_path;
  if (!v1 && !(v2_mount && v2_path)) return std::nullopt;
  const Mount& mount = v1 ? *v1_mount : *v2_mount;
  const std::string& path = v1 ? *v1_path : *v2_path;
  // The cgroup's path is relative to its hierarchy's root; the mount shows that hierarchy from mount.root on
  // (inside a container, often the container's own cgroup).
  std::string relative;
  if (mount.root == "/") relative = path;
  else if (path.compare(0, mount.root.size(), mount.root) == 0) relative = path.substr(mount.root.size());
  else return std::nullopt;
  std::string dir = root + mount.point + relative;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string top = root + mount.point;
  std::optional<double> limit;
  for (;;) {
    std::optional<double> here;
    if (v1) {
      const auto quota = read_first_line(dir + "/cpu.cfs_quota_us"), period = read_first_line(dir + "/cpu.cfs_period_us");
      if (quota && period) here = cgroup_v1_cpu_limit(*quota, *period);
    } else if (const auto cpu_max = read_first_line(dir + "/cpu.max")) {
      here = cgroup_v2_cpu_limit(*cpu_max);
    }
    if (here && (!limit || *here < *limit)) limit = here;
    if (dir.size() <= top.size()) break;
    const auto slash = dir.find_last_of('/');
    if (slash == std::string::npos || slash < top.size()) break;
    dir.erase(slash);
  }
  return limit;
}

// The CPUs this process's threads may run on: its affinity mask, or hardware_concurrency() where there is none.
inline int affinity_cpu_count() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

// The affinity mask's CPUs, capped by the cgroup quota rounded up (1.5 CPUs of quota: 2 threads), at least 1.
inline int available_cpus() {
  int n = affinity_cpu_count();
#if defined(__linux__)
  if (const auto limit = cgroup_cpu_limit()) n = std::min(n, static_cast<int>(std::ceil(*limit - 1e-9)));
#endif
  return std::max(n, 1);
}

}  // namespace eigenformer::detail
