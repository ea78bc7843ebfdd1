#include "src/cluster/host_info.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "src/common/net.h"

namespace quilt {
namespace {

int AffinityCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "model name")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown CPU";
}

int64_t MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "MemTotal:")) {
      rest = absl::StripAsciiWhitespace(rest);
      absl::ConsumeSuffix(&rest, " kB");
      int64_t kb = 0;
      if (absl::SimpleAtoi(rest, &kb)) return kb * 1024;
    }
  }
  return 0;
}

int64_t CgroupLimitBytes() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string v;
  int64_t limit = 0;
  if (in >> v && absl::SimpleAtoi(v, &limit) && limit > 0) return limit;
  return 0;
}

}  // namespace

HostInfo ReadHostInfo() {
  HostInfo h;
  h.hostname = LocalHostname();
  h.cpu_model = CpuModel();
  h.cores = AffinityCores();
  h.memory_bytes = MemTotalBytes();
  if (int64_t cg = CgroupLimitBytes(); cg > 0 && (h.memory_bytes == 0 || cg < h.memory_bytes)) {
    h.memory_bytes = cg;
  }
  return h;
}

}  // namespace quilt
