#include "src/common/cpu_affinity.h"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace quilt {
namespace {

// Upper bound of a CPU number accepted in a list.
constexpr int kMaxCpu = CPU_SETSIZE - 1;

absl::StatusOr<int> ParseCpu(absl::string_view text, absl::string_view entry) {
  int cpu = -1;
  if (!absl::SimpleAtoi(text, &cpu) || cpu < 0 || cpu > kMaxCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad CPU '", text, "' in CPU list entry '", entry, "'"));
  }
  return cpu;
}

// Every thread of this process (sched_setaffinity sets one thread's).
std::vector<pid_t> Threads() {
  std::vector<pid_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return {static_cast<pid_t>(syscall(SYS_gettid))};
  while (dirent* e = readdir(dir)) {
    int tid = 0;
    if (absl::SimpleAtoi(e->d_name, &tid)) tids.push_back(tid);
  }
  closedir(dir);
  return tids;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& list) {
  std::vector<int> cpus;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("empty entry in CPU list '", list, "'"));
    }
    const std::vector<absl::string_view> ends = absl::StrSplit(entry, absl::MaxSplits('-', 1));
    absl::StatusOr<int> first = ParseCpu(ends[0], entry);
    if (!first.ok()) return first.status();
    int last = *first;
    if (ends.size() == 2) {
      absl::StatusOr<int> l = ParseCpu(ends[1], entry);
      if (!l.ok()) return l.status();
      last = *l;
      if (last < *first) {
        return absl::InvalidArgumentError(
            absl::StrCat("CPU range '", entry, "' ends before it starts"));
      }
    }
    for (int c = *first; c <= last; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

absl::StatusOr<std::vector<int>> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

absl::Status PinProcessToCpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::InvalidArgumentError("no CPU to pin to");
  absl::StatusOr<std::vector<int>> allowed = AllowedCpus();
  if (!allowed.ok()) return allowed.status();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (!std::binary_search(allowed->begin(), allowed->end(), c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CPU ", c, " is not available (this process may run on ", FormatCpuList(*allowed), ")"));
    }
    CPU_SET(c, &set);
  }
  for (pid_t tid : Threads()) {
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) {
      return absl::InternalError(
          absl::StrCat("sched_setaffinity(thread ", tid, "): ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> PinProcessToCpuList(const std::string& list) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(list);
  if (!cpus.ok()) return cpus.status();
  if (absl::Status s = PinProcessToCpus(*cpus); !s.ok()) return s;
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace quilt
