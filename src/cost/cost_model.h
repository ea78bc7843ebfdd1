// The cost model: how long an op takes on a device for a number of batch
// rows (roofline — the slower of FLOPs at the device's effective FLOP/s and
// bytes at its memory bandwidth — plus a launch overhead, or the device's
// measured op-time table when it has one), and how long collectives take on
// the cluster's links. Op costs (FLOPs, bytes) come from the op registry;
// they are affine in the batch, so each op is evaluated at two batch sizes
// once and interpolated after.
#ifndef QUILT_SRC_COST_COST_MODEL_H_
#define QUILT_SRC_COST_COST_MODEL_H_

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/graph/graph.h"

namespace quilt {

// Effective speed of one device.
struct DeviceSpeed {
  double flops_per_s = 0;
  double memory_bytes_per_s = 0;
  // Fixed cost per op (kernel launch / dispatch).
  double overhead_s = 0;
  // Host time per step outside the ops.
  double step_overhead_s = 0;
  // Extra latency of a transfer that finds the transport asleep (no
  // communication for longer than transport_spin_s).
  double transport_wakeup_s = 0;
  double transport_spin_s = 0;
  // Emulated slowdown (development): memory-bound time is stretched too.
  double slowdown = 1;
};

DeviceSpeed SpeedOf(const quilt::v1::Device& d);

struct OpCostLine {
  // cost(b) = base + per_row · b, for b batch rows (b = 0: not batch-split).
  double flops_base = 0, flops_per_row = 0;
  double bytes_base = 0, bytes_per_row = 0;
};

class CostModel {
 public:
  // Precomputes per-op costs of `graph` and per-device speeds. Both must
  // outlive the model. Errors: INVALID_ARGUMENT for unknown op types.
  static absl::StatusOr<CostModel> Create(const Graph* graph, const Topology* topology);
  // A model of a coarsened graph whose op k stands for the ops members[k]
  // of `fine`'s graph: its time and FLOPs are the sums of its members'
  // (computed once per device and row count). `fine` must outlive it.
  static CostModel Composite(const Graph* coarse, const CostModel* fine,
                             std::vector<std::vector<int>> members);

  // Seconds for op `op_index` on device `device` over `rows` batch rows
  // (rows is ignored for ops without a batch dimension).
  double OpTime(int op_index, int device, int64_t rows) const;
  double Flops(int op_index, int64_t rows) const;
  // The least seconds per row the op takes on the device at any count of
  // 1..max_rows rows: OpTime(op, device, r) ≥ r × this for each such r (what
  // a lower bound may charge per row). For an op without the batch: OpTime.
  double LeastTimePerRow(int op_index, int device, int64_t max_rows) const;
  const DeviceSpeed& speed(int device) const { return speeds_[device]; }
  // The highest FLOP rate any op reaches on the device (its GEMM rate or a
  // faster measured op-type rate): what a lower bound may assume.
  double PeakFlopsPerS(int device) const;
  // Whether the op's tensors carry the batch (its cost scales with rows).
  bool Batched(int op_index) const { return batched_[op_index]; }

  // All-reduce of `bytes` over `devices` (ring order) with the given method:
  // seconds, and the resources held while it runs.
  struct Collective {
    double time_s = 0;
    std::vector<int> resources;
  };
  Collective AllReduce(quilt::v1::AggregationMethod method, const std::vector<int>& devices,
                       double bytes) const;

  const Topology& topology() const { return *topology_; }
  const Graph& graph() const { return *graph_; }

 private:
  // The op's FLOP rate on the device: its type's measured rate, or the
  // device's.
  double FlopRate(int op, int device) const;
  Collective Ring(const std::vector<int>& devices, double bytes, double factor_steps) const;
  Collective Hierarchical(const std::vector<int>& devices, double bytes) const;

  const Graph* graph_ = nullptr;
  const Topology* topology_ = nullptr;
  std::vector<OpCostLine> costs_;
  std::vector<bool> batched_;
  std::vector<DeviceSpeed> speeds_;
  // Measured per-op-type rates: op → type index (-1: none; empty when no
  // device has any), device × type → FLOP/s (0: none).
  std::vector<int> op_type_;
  std::vector<std::vector<double>> type_rates_;
  // Per device: op index → measured times (batch, seconds), sorted; empty if none.
  std::vector<std::vector<std::vector<std::pair<int64_t, double>>>> tables_;
  // Composite models: the fine model and each op's members; sums cached by
  // (op, device, rows) — so a composite model, unlike a plain one, must not
  // be used from two threads at once (copies of one may: they share only
  // the fine model, whose cache below is locked).
  const CostModel* fine_ = nullptr;
  std::vector<std::vector<int>> members_;
  mutable absl::flat_hash_map<uint64_t, double> composite_time_;
  // All-reduces by (method, bytes, devices): the planner's search lowers
  // hundreds of plans that repeat them, and each plan's lowering, ranking
  // and simulation price the same ones. A composite model keeps its own; a
  // plain one's is shared by its copies and locked (they may run on
  // several threads).
  mutable absl::flat_hash_map<std::vector<int64_t>, Collective> collectives_;
  struct SharedCollectives {
    absl::Mutex mu;
    absl::flat_hash_map<std::vector<int64_t>, Collective> map ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<SharedCollectives> shared_collectives_;
  Collective ComputeAllReduce(quilt::v1::AggregationMethod method, const std::vector<int>& devices,
                              double bytes) const;
};

}  // namespace quilt

#endif  // QUILT_SRC_COST_COST_MODEL_H_
