#include "src/planner/baselines.h"

#include <algorithm>
#include <cmath>
#include <coin/ClpSimplex.hpp>
#include <coin/CoinPackedVector.hpp>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/status.h"
#include "src/common/units.h"
#include "src/graph/op_registry.h"
#include "src/planner/lower.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

// Each device's peak memory in one step of data parallelism over the
// devices with `replicas` (global batch `batch`), aggregated by `method`
// (0 for a device it leaves unused).
absl::StatusOr<std::vector<int64_t>> DataParallelPeaks(const GraphIndex& ix, const CostModel& cost,
                                                       const Topology& topo,
                                                       const std::vector<int64_t>& replicas,
                                                       quilt::v1::AggregationMethod method,
                                                       int64_t batch) {
  const quilt::v1::Strategy s = DataParallelStrategy(ix.graph(), topo, replicas, method, "probe");
  ASSIGN_OR_RETURN(quilt::v1::DistributedProgram prog,
                   LowerWithoutGraph(ix, s, topo, &cost, batch));
  SimOptions options;
  options.index = &ix;
  ASSIGN_OR_RETURN(SimResult r, Simulate(prog, ix.graph(), topo, cost, options));
  std::vector<int64_t> peaks(topo.num_devices(), 0);
  for (const DeviceUsage& u : r.devices) {
    const int d = topo.DeviceIndex(u.device);
    if (d >= 0) peaks[d] = u.peak_memory_bytes;
  }
  return peaks;
}

// Peak memory of one step of the whole graph on device d with `rows` rows.
absl::StatusOr<int64_t> SingleDevicePeak(const GraphIndex& ix, const CostModel& cost,
                                         const Topology& topo, int d, int64_t rows) {
  std::vector<int64_t> one(topo.num_devices(), 0);
  one[d] = 1;
  ASSIGN_OR_RETURN(
      std::vector<int64_t> peaks,
      DataParallelPeaks(ix, cost, topo, one, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, rows));
  return peaks[d];
}

// Splits for parameter servers simulated to check they fit, at most.
constexpr int kSplitChecks = 3;

}  // namespace

RowLoadModel RowLoadModel::WithFixedBytes(const std::vector<double>& fixed) const {
  RowLoadModel m = *this;
  for (size_t d = 0; d < m.devices_.size() && d < fixed.size(); ++d) m.devices_[d].m0 = fixed[d];
  return m;
}

std::vector<std::string> ForwardOps(const Graph& g) {
  std::vector<std::string> out;
  for (const Op& op : g.ops) {
    if (op.forward_op.empty()) out.push_back(op.name);
  }
  return out;
}

absl::StatusOr<RowLoadModel> RowLoadModel::Fit(const Graph& g, const CostModel& cost,
                                               const Topology& topo, int64_t batch) {
  RowLoadModel m;
  m.graph_ = &g;
  m.cost_ = &cost;
  m.topo_ = &topo;
  const int n = topo.num_devices();
  // Memory depends on the graph and the rows, not on the device's speed:
  // probe once, at the even share and twice it.
  const int64_t r1 = std::max<int64_t>(1, batch / std::max(1, n));
  const int64_t r2 = 2 * r1;
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  ASSIGN_OR_RETURN(int64_t p1, SingleDevicePeak(ix, cost, topo, 0, r1));
  ASSIGN_OR_RETURN(int64_t p2, SingleDevicePeak(ix, cost, topo, 0, r2));
  const double m1 = std::max(0.0, static_cast<double>(p2 - p1) / static_cast<double>(r2 - r1));
  const double m0 = std::max(0.0, static_cast<double>(p1) - m1 * static_cast<double>(r1));
  for (int d = 0; d < n; ++d) {
    DeviceLoadModel dm;
    // Affine time through the even share and the speed-proportional share's
    // neighbourhood (the LP's operating range).
    const double a = m.ComputeSeconds(d, std::max<int64_t>(1, r1 / 2));
    const double b = m.ComputeSeconds(d, r2);
    const int64_t span = r2 - std::max<int64_t>(1, r1 / 2);
    dm.t1 = span > 0 ? (b - a) / static_cast<double>(span) : b;
    dm.t0 = std::max(0.0, b - dm.t1 * static_cast<double>(r2));
    dm.m0 = m0;
    dm.m1 = m1;
    m.devices_.push_back(dm);
  }
  return m;
}

int64_t LargestDataParallelBatch(const RowLoadModel& load, const Topology& topo) {
  // (Capped: a device whose memory does not grow with the rows fits any.)
  constexpr int64_t kAny = int64_t{1} << 40;
  int64_t rows = 0;
  for (int d = 0; d < topo.num_devices(); ++d) rows += std::min(kAny, load.MaxRows(d));
  return std::min(kAny, rows);
}

double RowLoadModel::ComputeSeconds(int d, int64_t rows) const {
  if (rows <= 0) return 0;
  if (seconds_.empty()) seconds_.resize(topo_->num_devices());
  auto [it, fresh] = seconds_[d].emplace(rows, 0.0);
  if (fresh) {
    double t = 0;
    for (size_t i = 0; i < graph_->ops.size(); ++i)
      t += cost_->OpTime(static_cast<int>(i), d, rows);
    it->second = t;
  }
  return it->second;
}

int64_t RowLoadModel::MaxRows(int d) const {
  const DeviceLoadModel& m = devices_[d];
  const double mem = static_cast<double>(topo_->device(d).proto.memory_bytes());
  if (m.m1 <= 0) return mem >= m.m0 ? std::numeric_limits<int64_t>::max() / 4 : 0;
  return std::max<int64_t>(0, static_cast<int64_t>(std::floor((mem - m.m0) / m.m1)));
}

namespace {

// The continuous optimum: min T  s.t.  t0_d + t1_d·b_d <= T,  Σ b_d = B,
// 0 <= b_d <= cap_d.
absl::StatusOr<std::vector<double>> SolveSplitLp(const std::vector<DeviceLoadModel>& load,
                                                 const std::vector<int64_t>& cap, int64_t batch) {
  const int n = static_cast<int>(load.size());
  ClpSimplex lp;
  lp.setLogLevel(0);
  const int cols = n + 1;  // b_0..b_{n-1}, T
  std::vector<double> collb(cols, 0.0), colub(cols), obj(cols, 0.0);
  for (int d = 0; d < n; ++d) colub[d] = static_cast<double>(std::min<int64_t>(cap[d], batch));
  colub[n] = COIN_DBL_MAX;
  obj[n] = 1.0;
  CoinPackedMatrix m(false, 0, 0);
  m.setDimensions(0, cols);
  std::vector<double> rowlb, rowub;
  for (int d = 0; d < n; ++d) {
    CoinPackedVector row;
    row.insert(d, std::max(load[d].t1, 1e-15));
    row.insert(n, -1.0);
    m.appendRow(row);
    rowlb.push_back(-COIN_DBL_MAX);
    rowub.push_back(-load[d].t0);
  }
  CoinPackedVector sum;
  for (int d = 0; d < n; ++d) sum.insert(d, 1.0);
  m.appendRow(sum);
  rowlb.push_back(static_cast<double>(batch));
  rowub.push_back(static_cast<double>(batch));
  lp.loadProblem(m, collb.data(), colub.data(), obj.data(), rowlb.data(), rowub.data());
  lp.primal();
  if (!lp.isProvenOptimal()) {
    return absl::FailedPreconditionError("the split's linear program has no solution");
  }
  const double* sol = lp.primalColumnSolution();
  return std::vector<double>(sol, sol + n);
}

// Every device's index.
std::vector<int> AllDevices(const Topology& topo) {
  std::vector<int> all(topo.num_devices());
  for (int d = 0; d < topo.num_devices(); ++d) all[d] = d;
  return all;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ProportionalSplit(const RowLoadModel& load,
                                                       const Topology& topo, int64_t batch) {
  return ProportionalSplitOver(load, topo, batch, AllDevices(topo));
}

absl::StatusOr<std::vector<int64_t>> ProportionalSplitOver(const RowLoadModel& load,
                                                           const Topology& topo, int64_t batch,
                                                           const std::vector<int>& devices) {
  // (Over the devices used, indexed 0..n-1 here; the rows of the others 0.)
  const int n = static_cast<int>(devices.size());
  std::vector<int64_t> cap(n);
  std::vector<DeviceLoadModel> models(n);
  int64_t room = 0;
  for (int i = 0; i < n; ++i) {
    cap[i] = load.MaxRows(devices[i]);
    models[i] = load.devices()[devices[i]];
    room += std::min(cap[i], batch);
  }
  if (room < batch) {
    std::string detail;
    for (int i = 0; i < n && i < 4; ++i) {
      absl::StrAppend(&detail, i ? ", " : "", topo.device(devices[i]).id, " fits ", cap[i]);
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "no split of the batch of %d fits the devices' memory (together they hold %d rows: %s%s)",
        batch, room, detail, n > 4 ? ", ..." : ""));
  }
  ASSIGN_OR_RETURN(std::vector<double> frac, SolveSplitLp(models, cap, batch));
  auto seconds = [&](int i, int64_t rows) { return load.ComputeSeconds(devices[i], rows); };
  // Whole rows: floors, then each remaining row to the device that finishes
  // it soonest.
  std::vector<int64_t> rows(n);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    rows[i] = std::min(cap[i], static_cast<int64_t>(std::floor(frac[i] + 1e-9)));
    total += rows[i];
  }
  std::vector<double> now(n);
  for (int i = 0; i < n; ++i) now[i] = seconds(i, rows[i]);
  auto best_receiver = [&](int skip) {
    int best = -1;
    double best_t = 0;
    for (int i = 0; i < n; ++i) {
      if (i == skip || rows[i] + 1 > cap[i]) continue;
      const double t = seconds(i, rows[i] + 1);
      if (best < 0 || t < best_t) {
        best = i;
        best_t = t;
      }
    }
    return std::make_pair(best, best_t);
  };
  while (total < batch) {
    const auto [i, t] = best_receiver(-1);
    if (i < 0)
      return absl::FailedPreconditionError("no split of the batch fits the devices' memory");
    ++rows[i];
    now[i] = t;
    ++total;
  }
  // Move single rows off the slowest device while that helps.
  for (int iter = 0; iter < 4 * n; ++iter) {
    const int slow = static_cast<int>(std::max_element(now.begin(), now.end()) - now.begin());
    const auto [i, t] = best_receiver(slow);
    if (i < 0 || rows[slow] == 0 || t >= now[slow]) break;
    --rows[slow];
    now[slow] = seconds(slow, rows[slow]);
    ++rows[i];
    now[i] = t;
  }
  // The even split, when it fits and is at least as fast, wins.
  std::vector<int64_t> even(n);
  bool even_fits = true;
  for (int i = 0; i < n; ++i) {
    even[i] = batch * (i + 1) / n - batch * i / n;
    even_fits &= even[i] <= cap[i];
  }
  // (The even split's times only where it fits: each is a sum over the ops.)
  auto slowest = [&](const std::vector<int64_t>& split) {
    double worst = 0;
    for (int i = 0; i < n; ++i) worst = std::max(worst, seconds(i, split[i]));
    return worst;
  };
  const std::vector<int64_t>& chosen = even_fits && slowest(even) <= slowest(rows) ? even : rows;
  std::vector<int64_t> out(topo.num_devices(), 0);
  for (int i = 0; i < n; ++i) out[devices[i]] = chosen[i];
  return out;
}

std::map<std::string, std::vector<int>> AssignServers(const Graph& g,
                                                      const std::vector<std::string>& params,
                                                      const std::vector<int>& devices) {
  // The devices share the parameter bytes evenly. Parameters larger than an
  // even share are split by rows of dim 0 over several servers (as
  // partitioned variables are); the rest go whole, largest first, to the
  // least loaded server.
  std::vector<std::pair<int64_t, std::string>> sized;
  int64_t total = 0;
  for (const std::string& p : params) {
    sized.push_back({g.FindTensor(p)->shape.NumElements(1), p});
    total += sized.back().first;
  }
  std::sort(sized.begin(), sized.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::map<std::string, std::vector<int>> out;
  if (devices.empty()) return out;
  const int64_t share = std::max<int64_t>(1, total / static_cast<int64_t>(devices.size()));
  std::vector<int64_t> load(devices.size(), 0);
  for (const auto& [size, name] : sized) {
    const Shape& shape = g.FindTensor(name)->shape;
    const int64_t rows = shape.rank() == 0 ? 1 : std::max<int64_t>(1, shape.dim(0).value);
    const int64_t pieces =
        std::min<int64_t>({rows, static_cast<int64_t>(devices.size()), (size + share - 1) / share});
    std::vector<size_t> order(devices.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return load[x] < load[y]; });
    for (int64_t k = 0; k < std::max<int64_t>(1, pieces); ++k) {
      load[order[k]] += size / std::max<int64_t>(1, pieces);
      out[name].push_back(devices[order[k]]);
    }
  }
  return out;
}

quilt::v1::Strategy DataParallelStrategy(const Graph& g, const Topology& topo,
                                         const std::vector<int64_t>& rows,
                                         quilt::v1::AggregationMethod method,
                                         const std::string& name, int64_t bucket_bytes) {
  quilt::v1::Strategy s;
  s.set_name(name);
  auto* group = s.add_groups();
  group->set_group(0);
  for (const std::string& op : ForwardOps(g)) group->add_ops(op);
  std::vector<int> used;
  for (int d = 0; d < topo.num_devices(); ++d) {
    if (rows[d] <= 0) continue;
    auto* r = group->add_replicas();
    r->set_device(topo.device(d).id);
    r->set_replicas(static_cast<int32_t>(rows[d]));
    used.push_back(d);
  }
  std::vector<std::string> params;
  for (const ParameterSpec& p : g.parameters) {
    if (!p.frozen) params.push_back(p.tensor);
  }
  std::map<std::string, std::vector<int>> servers;
  if (method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER)
    servers = AssignServers(g, params, used);
  const std::map<std::string, int> buckets =
      bucket_bytes > 0 && method != quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER
          ? GradientBuckets(g, bucket_bytes)
          : std::map<std::string, int>{};
  for (const std::string& name_p : params) {
    auto* a = s.add_aggregations();
    a->set_parameter(name_p);
    a->set_method(method);
    for (int d : servers[name_p]) a->add_servers(topo.device(d).id);
    auto b = buckets.find(name_p);
    if (b != buckets.end()) a->set_bucket(b->second);
  }
  return s;
}

std::map<std::string, int> GradientBuckets(const Graph& g, int64_t bucket_bytes) {
  // Gradients become ready roughly in reverse forward order: walk the
  // parameters by the position of their update's forward op, last first.
  std::map<std::string, int> position;
  absl::StatusOr<std::vector<int>> order = g.TopologicalOrder();
  if (!order.ok()) return {};
  for (size_t k = 0; k < order->size(); ++k)
    position.emplace(g.ops[(*order)[k]].name, static_cast<int>(k));
  std::vector<std::pair<int, std::string>> params;
  for (const Op& op : g.ops) {
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    if (schema == nullptr || !schema->is_update) continue;
    auto it = position.find(op.forward_op);
    params.push_back({it == position.end() ? 0 : it->second, op.inputs[0]});
  }
  std::sort(params.begin(), params.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::map<std::string, int> out;
  int bucket = 1;
  int64_t filled = 0;
  for (const auto& [pos, name] : params) {
    const TensorInfo* t = g.FindTensor(name);
    const int64_t bytes = t->shape.NumElements(1) * DTypeSize(t->dtype);
    if (filled > 0 && filled + bytes > bucket_bytes) {
      ++bucket;
      filled = 0;
    }
    out[name] = bucket;
    filled += bytes;
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParameterServerSplit(const Graph& g, const Topology& topo,
                                                          const CostModel& cost,
                                                          const RowLoadModel& load, int64_t batch) {
  return ParameterServerSplitOver(g, topo, cost, load, batch, AllDevices(topo));
}

absl::StatusOr<std::vector<int64_t>> ParameterServerSplitOver(const Graph& g, const Topology& topo,
                                                              const CostModel& cost,
                                                              const RowLoadModel& load,
                                                              int64_t batch,
                                                              const std::vector<int>& devices) {
  const int n = topo.num_devices();
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  const int used = static_cast<int>(devices.size());
  const int64_t rows = std::max<int64_t>(1, batch / std::max(1, used));
  std::vector<int64_t> even(n, 0);
  for (int d : devices) even[d] = 1;
  ASSIGN_OR_RETURN(std::vector<int64_t> peaks,
                   DataParallelPeaks(ix, cost, topo, even,
                                     quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, rows * used));
  std::vector<double> fixed(n);
  for (int d : devices) {
    fixed[d] = std::max(
        0.0, static_cast<double>(peaks[d]) - load.devices()[d].m1 * static_cast<double>(rows));
  }
  // The fit is affine: each split is checked in full, and a device found
  // over has what the model missed there added to its fixed bytes, for a
  // few tries (a split over memory is not offered as a baseline).
  std::string over;
  for (int attempt = 0; attempt < kSplitChecks; ++attempt) {
    absl::StatusOr<std::vector<int64_t>> fitted =
        ProportionalSplitOver(load.WithFixedBytes(fixed), topo, batch, devices);
    if (!fitted.ok()) {
      // ("no split of the batch of B fits the devices' memory (…)")
      std::string message(fitted.status().message());
      const size_t at = message.find(" (");
      // (The model's count of rows is an estimate: checked splits may hold
      // fewer.)
      if (at != std::string::npos) {
        message.insert(at + 2, "by the memory model, ");
        message.insert(at, " with parameter servers either");
      }
      return absl::Status(fitted.status().code(), message);
    }
    const std::vector<int64_t>& split = *fitted;
    ASSIGN_OR_RETURN(std::vector<int64_t> split_peaks,
                     DataParallelPeaks(ix, cost, topo, split,
                                       quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, batch));
    over.clear();
    for (int d : devices) {
      const int64_t memory = topo.device(d).proto.memory_bytes();
      const int64_t peak = split_peaks[d];
      if (peak <= memory) continue;
      // (What the model missed at these rows.)
      fixed[d] += std::max(1.0, static_cast<double>(peak) - fixed[d] -
                                    load.devices()[d].m1 * static_cast<double>(split[d]));
      if (over.empty()) {
        over =
            absl::StrCat(split[d], " rows on ", topo.device(d).id, " need ", HumanBytes(peak),
                         " of its ", HumanBytes(memory), ": ", HumanBytes(peak - memory), " over");
      }
    }
    if (over.empty()) return split;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no split of the batch of ", batch,
                   " fits the devices' memory with parameter servers either (in the last of ",
                   kSplitChecks, " splits simulated, ", over, ")"));
}

std::vector<NamedStrategy> Baselines(const Graph& g, const Topology& topo, const CostModel& cost,
                                     int64_t batch, std::optional<RowLoadModel>* load_out,
                                     bool ps_split) {
  const int n = topo.num_devices();
  std::vector<NamedStrategy> out;
  absl::StatusOr<RowLoadModel> load = RowLoadModel::Fit(g, cost, topo, batch);
  if (load_out != nullptr && load.ok()) *load_out = *load;
  // Single device: the one the whole batch computes fastest on (by the
  // load model, which counts per-op and per-step overheads; the highest
  // FLOP/s without it), among those it fits.
  int best = 0;
  for (int d = 1; d < n; ++d) {
    if (cost.speed(d).flops_per_s > cost.speed(best).flops_per_s) best = d;
  }
  if (load.ok()) {
    double best_s = 0;
    int fastest = -1;
    for (int d = 0; d < n; ++d) {
      if (load->MaxRows(d) < batch) continue;
      const double s = load->ComputeSeconds(d, batch);
      if (fastest < 0 || s < best_s) {
        fastest = d;
        best_s = s;
      }
    }
    if (fastest >= 0) best = fastest;
  }
  std::vector<int64_t> single(n, 0);
  single[best] = 1;
  out.push_back({"single-device",
                 DataParallelStrategy(g, topo, single, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                      "single-device"),
                 ""});
  if (n < 2) return out;
  std::vector<int64_t> even(n, 1);
  out.push_back({"dp-even-ring",
                 DataParallelStrategy(g, topo, even, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                      "dp-even-ring"),
                 ""});
  out.push_back({"dp-even-ps",
                 DataParallelStrategy(g, topo, even, quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER,
                                      "dp-even-ps"),
                 ""});
  absl::StatusOr<std::vector<int64_t>> prop = absl::UnknownError("");
  prop = load.ok() ? ProportionalSplit(*load, topo, batch) : load.status();
  // Parameter servers' shards of the optimizer state leave each device more
  // room: where no split fits all-reduce's memory, they may fit one
  // (bert_large on HeteroG's testbed: 282 rows fit with all-reduce, 350
  // with parameter servers).
  // Where all-reduce's split fits but some device holds all the rows its
  // memory allows, parameter servers' own split may give it more.
  absl::StatusOr<std::vector<int64_t>> prop_ps = prop;
  bool memory_bound = false;
  for (int d = 0; prop.ok() && d < n; ++d) memory_bound |= (*prop)[d] >= load->MaxRows(d);
  if (ps_split && load.ok() && n > 1 && (!prop.ok() || memory_bound)) {
    prop_ps = ParameterServerSplit(g, topo, cost, *load, batch);
    if (!prop_ps.ok() && prop.ok()) prop_ps = prop;
  }
  for (auto [name, method] :
       {std::pair{"dp-proportional-ring", quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE},
        std::pair{"dp-proportional-ps", quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER}}) {
    NamedStrategy ns;
    ns.name = name;
    const absl::StatusOr<std::vector<int64_t>>& split =
        method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER ? prop_ps : prop;
    if (split.ok()) {
      ns.strategy = DataParallelStrategy(g, topo, *split, method, name);
    } else {
      ns.infeasible_reason = std::string(split.status().message());
    }
    out.push_back(std::move(ns));
  }
  return out;
}

absl::Status CheckStateFits(const Graph& g, const Topology& topo) {
  double state = 0, memory = 0;
  std::set<std::string> seen;
  for (const StateUpdate& u : g.updates) {
    if (!seen.insert(u.target).second) continue;
    const TensorInfo* t = g.FindTensor(u.target);
    if (t != nullptr) state += static_cast<double>(t->shape.NumElements(1) * DTypeSize(t->dtype));
  }
  for (const DeviceEntry& d : topo.devices()) memory += static_cast<double>(d.proto.memory_bytes());
  if (state <= memory) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the model does not fit this cluster at any batch: its parameters and optimizer state take ",
      HumanBytes(static_cast<int64_t>(state)), " and the cluster's ", topo.num_devices(), " device",
      topo.num_devices() == 1 ? " holds " : "s hold ", HumanBytes(static_cast<int64_t>(memory)),
      " in all"));
}

}  // namespace quilt
