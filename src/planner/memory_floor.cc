#include "src/planner/memory_floor.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "src/common/units.h"

namespace quilt {
namespace {

int64_t Bytes(const TensorInfo& t, int64_t rows) {
  return t.shape.NumElements(rows) * DTypeSize(t.dtype);
}

}  // namespace

int64_t MemoryFloor::LargestBatch(int64_t capacity_bytes) const {
  const int64_t left = capacity_bytes - resident_bytes - fixed_bytes;
  if (left < 0) return 0;
  if (bytes_per_row <= 0) return -1;
  return left / bytes_per_row;
}

bool PastTheFloorMargin(int64_t batch, int64_t largest) {
  if (largest < 0) return false;
  if (largest == 0) return true;
  const int64_t margin =
      std::max<int64_t>(1, static_cast<int64_t>(kFloorSearchMargin * static_cast<double>(largest)));
  return batch > largest + margin;
}

int64_t TotalMemoryBytes(const Topology& topo) {
  int64_t total = 0;
  for (const DeviceEntry& d : topo.devices()) {
    const int64_t m = std::max<int64_t>(0, d.proto.memory_bytes());
    total = m > std::numeric_limits<int64_t>::max() - total ? std::numeric_limits<int64_t>::max()
                                                            : total + m;
  }
  return total;
}

absl::StatusOr<MemoryFloor> ComputeMemoryFloor(const Graph& g) {
  if (!g.has_backward) {
    return absl::InvalidArgumentError(
        "the memory floor needs a training graph (with a backward pass)");
  }
  MemoryFloor floor;
  for (const TensorInfo& t : g.tensors()) {
    if (t.role == TensorRole::kParameter || t.role == TensorRole::kOptimizerState ||
        t.role == TensorRole::kConstant) {
      floor.resident_bytes += Bytes(t, 1);
    }
  }
  const std::map<std::string, int> producers = g.Producers();
  std::set<std::string> counted;
  for (const Op& op : g.ops) {
    if (op.forward_op.empty()) continue;  // a forward op
    for (const std::string& name : op.inputs) {
      if (name.empty() || counted.count(name)) continue;
      const TensorInfo* t = g.FindTensor(name);
      if (t == nullptr) {
        return absl::InvalidArgumentError("op '" + op.name + "' reads undeclared tensor '" + name +
                                          "'");
      }
      bool forward = t->role == TensorRole::kInput || t->role == TensorRole::kLabel;
      if (t->role == TensorRole::kActivation || t->role == TensorRole::kLoss) {
        auto p = producers.find(name);
        forward = p != producers.end() && g.ops[p->second].forward_op.empty();
      }
      if (!forward) continue;
      counted.insert(name);
      if (t->shape.HasBatch()) {
        floor.bytes_per_row += Bytes(*t, 1);
      } else {
        floor.fixed_bytes += Bytes(*t, 1);
      }
    }
  }
  return floor;
}

std::string AboveTheMemoryFloor(const quilt::v1::PlanReport& r) {
  const quilt::v1::MemoryFloor& f = r.memory_floor();
  if (f.capacity_bytes() <= 0 || f.largest_batch() < 0 || f.largest_batch() >= r.global_batch()) {
    return "";
  }
  const std::string sizes = absl::StrFormat(
      "the model's parameters, optimizer state and constants take %s, and each batch row's "
      "activations that the backward pass reads %s, of the %s %s",
      HumanBytes(f.resident_bytes() + f.fixed_bytes()), HumanBytes(f.bytes_per_row()),
      HumanBytes(f.capacity_bytes()),
      f.devices() == 1 ? "the device holds" : "the devices hold in all");
  if (f.largest_batch() == 0) {
    return "; by the memory model the model fits these devices at no batch: " + sizes +
           "; devices with more memory, or more of them, are needed";
  }
  return absl::StrFormat(
      "; by the memory model no plan holds more than about %d batch row%s here "
      "at once: %s",
      f.largest_batch(), f.largest_batch() == 1 ? "" : "s", sizes);
}

}  // namespace quilt
