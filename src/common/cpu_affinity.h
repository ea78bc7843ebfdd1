// CPU affinity: parsing CPU lists ("0", "0,2-3") and pinning this process
// (every thread it has or will start) to one. A device that shares a host
// with others is pinned so that it keeps the cores it was measured on:
// the cores of a machine may run at different speeds, and a process that
// moves between them is measured at a mix of both.
#ifndef QUILT_SRC_COMMON_CPU_AFFINITY_H_
#define QUILT_SRC_COMMON_CPU_AFFINITY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace quilt {

// The CPUs of a list like "0,2-3", sorted, without repeats. Errors:
// INVALID_ARGUMENT naming the bad entry.
absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& list);

// The CPUs this process may run on now.
absl::StatusOr<std::vector<int>> AllowedCpus();

// Restricts this process, all of its threads, to `cpus`. Errors:
// INVALID_ARGUMENT when a CPU is not among the allowed ones (naming it and
// them); the affinity is then unchanged.
absl::Status PinProcessToCpus(const std::vector<int>& cpus);

// ParseCpuList, then PinProcessToCpus: the CPUs pinned to.
absl::StatusOr<std::vector<int>> PinProcessToCpuList(const std::string& list);

// "0-2,5".
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_CPU_AFFINITY_H_
