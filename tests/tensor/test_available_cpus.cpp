// The thread pool's default size (tensor/available_cpus.hpp): the affinity mask, capped by a cgroup CPU quota
// read from made-up /proc and /sys trees in the layouts of cgroup v2 (Docker and Kubernetes today), v1, the
// hybrid layout with the cpu controller on v1, and containers (with and without a cgroup namespace).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "support/cases.hpp"
#include "support/files.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace eftest;

// A made-up root holding proc/self/{cgroup,mountinfo} and the cgroup files a case names; removed at the end.
class FakeCgroupRoot {
 public:
  void write(const std::string& relative, const std::string& text) const {
    const fs::path p = dir_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return dir_.path().string(); }

 private:
  ScratchDir dir_;
};

const std::string v2_mount = "30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

struct LimitCase {
  std::string name;
  std::string cgroup, mountinfo;
  std::vector<std::pair<std::string, std::string>> files;
  std::optional<double> expected;
};

}  // namespace

TEST_CASE("available CPUs: cgroup cpu.max and cfs quota lines parse to CPUs, 'max' and -1 to no limit") {
  namespace d = ef::detail;
  CHECK(d::cgroup_v2_cpu_limit("150000 100000") == std::optional<double>(1.5));
  CHECK(d::cgroup_v2_cpu_limit("100000 100000") == std::optional<double>(1.0));
  CHECK_FALSE(d::cgroup_v2_cpu_limit("max 100000"));
  CHECK_FALSE(d::cgroup_v2_cpu_limit("garbage"));
  CHECK_FALSE(d::cgroup_v2_cpu_limit("100000 0"));
  CHECK(d::cgroup_v1_cpu_limit("50000", "100000") == std::optional<double>(0.5));
  CHECK_FALSE(d::cgroup_v1_cpu_limit("-1", "100000"));
  CHECK_FALSE(d::cgroup_v1_cpu_limit("", "100000"));
  CHECK(d::unescape_mountinfo("/mnt/a\\040b") == "/mnt/a b");
  CHECK(d::unescape_mountinfo("/ends\\04") == "/ends\\04");
}

TEST_CASE("available CPUs: the smallest quota of the process's cgroup and its ancestors, in every cgroup layout") {
  const std::vector<LimitCase> cases = {
      {"v2, no limit anywhere", "0::/user.slice/session-1.scope\n", v2_mount,
       {{"sys/fs/cgroup/user.slice/cpu.max", "max 100000\n"},
        {"sys/fs/cgroup/user.slice/session-1.scope/cpu.max", "max 100000\n"}},
       std::nullopt},
      {"v2, the limit on the process's own cgroup", "0::/docker/abc\n", v2_mount,
       {{"sys/fs/cgroup/docker/abc/cpu.max", "150000 100000\n"}}, 1.5},
      {"v2, a tighter limit on an ancestor", "0::/kubepods/pod1/c1\n", v2_mount,
       {{"sys/fs/cgroup/kubepods/pod1/cpu.max", "50000 100000\n"},
        {"sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "200000 100000\n"}},
       0.5},
      {"v2, a container in a cgroup namespace of its own (its cgroup is the root)", "0::/\n",
       "40 30 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
       {{"sys/fs/cgroup/cpu.max", "200000 100000\n"}}, 2.0},
      {"v2, no cgroup namespace: the mount shows the hierarchy from the container's cgroup on", "0::/docker/abc/inner\n",
       "40 30 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
       {{"sys/fs/cgroup/inner/cpu.max", "300000 100000\n"}, {"sys/fs/cgroup/cpu.max", "100000 100000\n"}}, 1.0},
      {"v2, a mount point with a space in it", "0::/g\n", "30 24 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n",
       {{"sys/fs/my cgroup/g/cpu.max", "250000 100000\n"}}, 2.5},
      {"v1 with cpu,cpuacct", "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n",
       "33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
       {{"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "100000\n"},
        {"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n"}},
       1.0},
      {"v1, quota -1", "4:cpu:/\n", "33 25 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
       {{"sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n"}, {"sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"}},
       std::nullopt},
      {"hybrid: the cpu controller on v1, an empty v2 beside it", "4:cpu:/q\n0::/\n",
       "33 25 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
       "34 25 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
       {{"sys/fs/cgroup/cpu/q/cpu.cfs_quota_us", "300000\n"},
        {"sys/fs/cgroup/cpu/q/cpu.cfs_period_us", "100000\n"},
        {"sys/fs/cgroup/unified/cpu.max", "100000 100000\n"}},
       3.0},
      {"no cgroup file system mounted", "0::/\n", "22 1 8:1 / / rw - ext4 /dev/vda rw\n", {}, std::nullopt},
      {"a cgroup path outside the mount's root", "0::/elsewhere\n",
       "40 30 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
       {{"sys/fs/cgroup/cpu.max", "100000 100000\n"}}, std::nullopt},
  };
  std::size_t ran = 0;
  for (const auto& c : cases) {
    CAPTURE(c.name);
    FakeCgroupRoot root;
    root.write("proc/self/cgroup", c.cgroup);
    root.write("proc/self/mountinfo", c.mountinfo);
    for (const auto& [file, text] : c.files) root.write(file, text);
    CHECK(ef::detail::cgroup_cpu_limit(root.root()) == c.expected);
    ++ran;
  }
  check_ran(ran, 11, "cgroup layouts");
  FakeCgroupRoot empty;  // no /proc at all (not Linux, or /proc not mounted)
  CHECK_FALSE(ef::detail::cgroup_cpu_limit(empty.root()));
}

#if defined(__linux__)
TEST_CASE("available CPUs: a thread pinned to one CPU gets a default pool of one thread") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
  int first = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE && first < 0; ++cpu)
    if (CPU_ISSET(cpu, &saved)) first = cpu;
  REQUIRE(first >= 0);
  const char* env = std::getenv("EIGENFORMER_NUM_THREADS");
  const std::optional<std::string> saved_env = env ? std::optional<std::string>(env) : std::nullopt;
  unsetenv("EIGENFORMER_NUM_THREADS");
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  const int affinity = ef::detail::affinity_cpu_count(), available = ef::detail::available_cpus(),
            pool_default = ef::detail::default_num_threads();
  sched_setaffinity(0, sizeof(saved), &saved);
  if (saved_env) setenv("EIGENFORMER_NUM_THREADS", saved_env->c_str(), 1);
  CHECK(affinity == 1);
  CHECK(available == 1);
  CHECK(pool_default == 1);
  // Unpinned, the count is the mask's again: as many CPUs as the saved mask holds, capped by any quota.
  CHECK(ef::detail::affinity_cpu_count() == CPU_COUNT(&saved));
  CHECK(ef::detail::available_cpus() >= 1);
  CHECK(ef::detail::available_cpus() <= CPU_COUNT(&saved));
}
#endif
