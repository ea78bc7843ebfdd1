// What this host offers for CPU devices: the cores this process may run on,
// the CPU model name and the memory it may use (cgroup limit included).
#ifndef QUILT_SRC_CLUSTER_HOST_INFO_H_
#define QUILT_SRC_CLUSTER_HOST_INFO_H_

#include <cstdint>
#include <string>

namespace quilt {

struct HostInfo {
  std::string hostname;
  std::string cpu_model;
  // Logical CPUs in this process's affinity mask.
  int cores = 1;
  // min(MemTotal, cgroup memory limit).
  int64_t memory_bytes = 0;
};

HostInfo ReadHostInfo();

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_HOST_INFO_H_
