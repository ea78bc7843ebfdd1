// Internal to the program validator: its view of a program (instructions
// as nodes in id order, their reads and writes as row ranges of tensors,
// collectives, groups, resident instances) and the checks over it.
// program_validator.cc indexes the program and checks transfers,
// collectives, coverage and the strategy; validator_dataflow.cc follows the
// dataflow (every read written before it, partial sums summed exactly once).
#ifndef QUILT_SRC_PLANNER_VALIDATOR_STATE_H_
#define QUILT_SRC_PLANNER_VALIDATOR_STATE_H_

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/cluster/topology.h"
#include "src/common/status.h"
#include "src/graph/graph_index.h"

namespace quilt::validator_internal {

using quilt::v1::Instruction;

struct Range {
  int64_t begin = 0, end = 0;
  bool whole() const { return begin == 0 && end == 0; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
  bool operator<(const Range& o) const { return begin != o.begin ? begin < o.begin : end < o.end; }
};

// Whether an instance holding `have` contains the rows `need`.
inline bool Covers(const Range& have, const Range& need) {
  if (have.whole() || have == need) return true;
  return !need.whole() && have.begin <= need.begin && need.end <= have.end;
}

struct Access {
  int tensor;
  Range range;
};

struct Node {
  const Instruction* ins = nullptr;
  int device = 0;
  // Writes of the instruction: [first_write, first_write + num_writes) in
  // Validator::writes_, with whether each holds a partial sum.
  int first_write = 0, num_writes = 0;
};

class Validator {
 public:
  Validator(const quilt::v1::DistributedProgram& p, const GraphIndex& ix, const Topology& topo)
      : p_(p), g_(ix.graph()), ix_(ix), topo_(topo) {}

  absl::Status Run() {
    if (p_.global_batch() <= 0)
      return absl::InvalidArgumentError("the program has no global batch");
    RETURN_IF_ERROR(Index());
    RETURN_IF_ERROR(CheckRanges());
    RETURN_IF_ERROR(CheckTransfers());
    RETURN_IF_ERROR(CheckCollectives());
    RETURN_IF_ERROR(CheckDisjointSums());
    RETURN_IF_ERROR(CheckCoverage());
    RETURN_IF_ERROR(CheckStrategy());
    return CheckDataflow();
  }

 private:
  std::string TensorName(int t) const { return g_.tensors()[t].name; }
  const std::string& DeviceName(int d) const { return topo_.device(d).id; }
  bool Batched(int t) const { return ix_.Batched(t); }

  // `hint`: the index a range gives (TensorRange.tensor_index; -1: none).
  absl::StatusOr<int> Tensor(const std::string& name, int hint = -1) const {
    const int t = ix_.Tensor(name, hint);
    if (t < 0) {
      return absl::InvalidArgumentError("the program names unknown tensor '" + name + "'");
    }
    return t;
  }
  absl::StatusOr<int> Device(const std::string& id) const {
    const int d = topo_.DeviceIndex(id);
    if (d < 0) return absl::InvalidArgumentError("the program names unknown device '" + id + "'");
    return d;
  }
  int64_t Key(int tensor, int device) const {
    return static_cast<int64_t>(tensor) * topo_.num_devices() + device;
  }

  absl::Status Index();
  absl::Status CheckRanges() const;
  // `range` within its tensor; `bytes` (unless kUnstated): the bytes it
  // holds. `id`: the instruction naming it (-1: a device's persistent or
  // feed list).
  static constexpr int64_t kUnstated = std::numeric_limits<int64_t>::min();
  absl::Status CheckRange(const quilt::v1::TensorRange& range, int64_t id, int64_t bytes) const;
  absl::Status CheckTransfers();
  absl::Status CheckCollectives();
  // A group's NIC bandwidths, where given: one per member, its node's.
  absl::Status CheckGroupNics(const quilt::v1::DeviceGroup& group,
                              const std::vector<int>& members) const;
  // No row of a tensor summed by two all-reduces on one device.
  absl::Status CheckDisjointSums();
  absl::Status CheckCoverage();
  absl::Status CheckStrategy();
  absl::Status CheckDataflow();
  // The latest instruction among `n`'s dependencies on its device that
  // writes rows `need` of `tensor` (-1 = resident, -2 = none).
  int Writer(int n, int tensor, const Range& need) const;
  // Rows [begin, end) of dim 0 that slice `r` of `tensor` stands for.
  std::pair<int64_t, int64_t> Rows(int tensor, const Range& r) const;
  // What `n` reads of rows `need`: the slices of partitioned all-reduces
  // among its dependencies written into the tensor's instance after the
  // latest writer (Writer), as far as they overlap `need`, and that writer
  // when they do not cover it (-1 = resident; empty = nothing written).
  std::vector<int> Contributors(int n, int tensor, const Range& need) const;
  absl::Status ReadsOf(int n, std::vector<Access>* reads) const;
  absl::Status AddRange(const quilt::v1::TensorRange& r, std::vector<Access>* out) const {
    ASSIGN_OR_RETURN(int t, Tensor(r.tensor(), r.tensor_index()));
    out->push_back({t, {r.begin(), r.end()}});
    return absl::OkStatus();
  }
  // The rows an all-reduce sums, which it both reads and writes.
  absl::Status AddSummed(const quilt::v1::AllReduceInstr& ar, std::vector<Access>* out) const;
  absl::Status WritesOf(int n, std::vector<Access>* writes) const;
  // Whether node n depends on node a, directly or through others (a < n).
  bool DependsOn(int n, int a) const;

  const quilt::v1::DistributedProgram& p_;
  const Graph& g_;
  const GraphIndex& ix_;
  const Topology& topo_;
  std::vector<Node> nodes_;  // in id order
  absl::flat_hash_map<int64_t, int> node_of_id_;
  std::vector<std::vector<int>> deps_;  // node indices
  absl::flat_hash_map<int64_t, int> send_, recv_, push_;
  absl::flat_hash_map<int64_t, std::vector<int>> collective_;
  absl::flat_hash_map<int64_t, std::vector<int>> groups_;
  // Per op: (device, range) of its compute instructions.
  std::vector<std::vector<std::pair<int, Range>>> op_runs_;
  absl::flat_hash_map<int64_t, std::vector<Range>> resident_;  // Key(tensor, device)
  std::vector<Access> writes_;
  std::vector<bool> write_partial_;
};

}  // namespace quilt::validator_internal

#endif  // QUILT_SRC_PLANNER_VALIDATOR_STATE_H_
