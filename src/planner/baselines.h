// The data-parallel baselines every plan is compared with (DESIGN §5):
// single device (the fastest), and data parallelism with an even batch split
// and with a speed-proportional split, each with ring all-reduce and with
// parameter servers. The proportional split gives each device rows in
// proportion to its speed; when that would overflow a device's memory, the
// split is solved as a linear program (COIN-OR CLP): minimize the step's
// compute time subject to every device's memory.
#ifndef QUILT_SRC_PLANNER_BASELINES_H_
#define QUILT_SRC_PLANNER_BASELINES_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"

namespace quilt {

struct NamedStrategy {
  std::string name;
  quilt::v1::Strategy strategy;
  // Set when the strategy cannot be built (e.g. no split fits memory).
  std::string infeasible_reason;
};

// Per-device compute time and memory as functions of its batch rows b:
// time is the cost model's sum over every op (exact, piecewise linear),
// with an affine fit t0 + t1·b around the expected operating point for the
// linear program; memory is m0 + m1·b, fitted from simulated single-device
// steps at two batch sizes (so it counts what the simulator counts:
// parameters, gradients, optimizer state, live activations). Parameter
// servers shard the optimizer state over the devices: where the split
// for all-reduce fits no batch or fills a device's memory, the
// parameter-server baseline's m0 comes from simulating it on an even split
// (the rows' share, m1, is the same).
struct DeviceLoadModel {
  double t0 = 0, t1 = 0;
  double m0 = 0, m1 = 0;
};

class RowLoadModel {
 public:
  // Errors: those of lowering or simulating the single-device probes.
  static absl::StatusOr<RowLoadModel> Fit(const Graph& graph, const CostModel& cost,
                                          const Topology& topo, int64_t batch);
  // Seconds of computation of one step with `rows` rows on device `d`.
  double ComputeSeconds(int d, int64_t rows) const;
  // Rows that fit device d's memory.
  int64_t MaxRows(int d) const;
  // The same model with each device's row-independent bytes (m0) as
  // `fixed` gives them (one per device): another aggregation's.
  RowLoadModel WithFixedBytes(const std::vector<double>& fixed) const;
  const std::vector<DeviceLoadModel>& devices() const { return devices_; }

 private:
  const Graph* graph_ = nullptr;
  const CostModel* cost_ = nullptr;
  const Topology* topo_ = nullptr;
  std::vector<DeviceLoadModel> devices_;
  // ComputeSeconds per device, by rows.
  mutable std::vector<absl::flat_hash_map<int64_t, double>> seconds_;
};

// Rows per device summing to `batch` that minimize the slowest device's
// computation within every device's memory: a linear program (COIN-OR CLP)
// on the affine fits, rounded to whole rows and refined on the exact times.
// Never slower (on the load model) than the even split when that fits.
// Errors: FAILED_PRECONDITION when no split fits.
absl::StatusOr<std::vector<int64_t>> ProportionalSplit(const RowLoadModel& load,
                                                       const Topology& topo, int64_t batch);
// The same over `devices` alone (indices; the others get no rows).
absl::StatusOr<std::vector<int64_t>> ProportionalSplitOver(const RowLoadModel& load,
                                                           const Topology& topo, int64_t batch,
                                                           const std::vector<int>& devices);

// ProportionalSplit for data parallelism with parameter servers: each
// device's row-independent bytes from simulating it on an even split
// (`load` gives the rows' share). Errors: the lowering's or the
// simulator's; FAILED_PRECONDITION when no split fits.
absl::StatusOr<std::vector<int64_t>> ParameterServerSplit(const Graph& graph, const Topology& topo,
                                                          const CostModel& cost,
                                                          const RowLoadModel& load, int64_t batch);
// The same over `devices` alone (indices; the others get no rows).
absl::StatusOr<std::vector<int64_t>> ParameterServerSplitOver(
    const Graph& graph, const Topology& topo, const CostModel& cost, const RowLoadModel& load,
    int64_t batch, const std::vector<int>& devices);

// The largest global batch the proportional split fits in the devices'
// memory (the sum of each device's rows by the memory model `load`); 0
// when no device fits a row.
int64_t LargestDataParallelBatch(const RowLoadModel& load, const Topology& topo);

// Forward ops (the op groups of a data-parallel strategy).
std::vector<std::string> ForwardOps(const Graph& graph);

// Parameter servers for `params` among `devices`: parameter bytes shared
// evenly, parameters larger than an even share split by rows of dim 0 over
// several servers. Returns the servers of each parameter (shards in order).
std::map<std::string, std::vector<int>> AssignServers(const Graph& graph,
                                                      const std::vector<std::string>& params,
                                                      const std::vector<int>& devices);

// Gradient fusion buckets as data-parallel frameworks form them: gradients
// in the order they become ready (reverse forward order), a new bucket
// whenever the next would overflow `bucket_bytes`. Parameter → bucket id
// (from 1).
inline constexpr int64_t kBucketBytes = 25 << 20;  // PyTorch DDP's default
std::map<std::string, int> GradientBuckets(const Graph& graph, int64_t bucket_bytes);

// One group with `rows[d]` replicas per device (0 = unused); one collective
// per gradient, or with `bucket_bytes` > 0 per fusion bucket
// (GradientBuckets; all-reduce methods only).
quilt::v1::Strategy DataParallelStrategy(const Graph& graph, const Topology& topo,
                                         const std::vector<int64_t>& rows,
                                         quilt::v1::AggregationMethod method,
                                         const std::string& name, int64_t bucket_bytes = 0);

// `load`, when given, receives the load model the splits were sized by
// (left empty when it could not be fitted). With `ps_split` false,
// dp-proportional-ps takes all-reduce's split instead of sizing its own
// (ParameterServerSplit simulates a few plans in full: for
// callers that will not simulate it).
std::vector<NamedStrategy> Baselines(const Graph& graph, const Topology& topo,
                                     const CostModel& cost, int64_t batch,
                                     std::optional<RowLoadModel>* load = nullptr,
                                     bool ps_split = true);
// The data-parallel baselines, which Baselines lists for two or more
// devices.
inline constexpr const char* kDataParallelBaselines[] = {
    "dp-even-ring", "dp-even-ps", "dp-proportional-ring", "dp-proportional-ps"};

// Every parameter and optimizer state lives on at least one device, at any
// batch and in any plan: when they outweigh the whole cluster's memory, no
// search can find a plan, and saying so at once beats searching for its
// whole time budget. Errors: RESOURCE_EXHAUSTED saying both sizes.
absl::Status CheckStateFits(const Graph& graph, const Topology& topo);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_BASELINES_H_
