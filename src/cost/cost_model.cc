#include "src/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "src/common/hierarchical_layout.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"

namespace quilt {
namespace {

constexpr double kGpuOverheadS = 6e-6;
constexpr double kCpuOverheadS = 1.5e-6;

// Resources a collective holds, each once: a collective over many
// members meets each link many times (every pair within a node), and
// sorting them all was most of a large collective's cost.
class ResourceSet {
 public:
  explicit ResourceSet(int num_resources) : in_(num_resources, 0) {}
  void Add(const std::vector<int>& resources) {
    for (int r : resources) {
      if (in_[r]) continue;
      in_[r] = 1;
      list_.push_back(r);
    }
  }
  // In ascending order.
  std::vector<int> Take() {
    std::sort(list_.begin(), list_.end());
    return std::move(list_);
  }

 private:
  std::vector<char> in_;
  std::vector<int> list_;
};

}  // namespace

DeviceSpeed SpeedOf(const quilt::v1::Device& d) {
  DeviceSpeed s;
  const bool gpu = d.kind() == quilt::v1::DEVICE_KIND_GPU;
  s.slowdown = d.compute_slowdown() >= 1 ? d.compute_slowdown() : 1;
  if (d.measured_gemm_flops_per_s() > 0) {
    s.flops_per_s = d.measured_gemm_flops_per_s();
  } else {
    s.flops_per_s =
        d.peak_fp32_flops_per_s() * (d.efficiency() > 0 ? d.efficiency() : kDefaultEfficiency);
  }
  s.memory_bytes_per_s = d.memory_bandwidth_bytes_per_s() > 0
                             ? d.memory_bandwidth_bytes_per_s()
                             : (gpu ? kDefaultGpuMemoryBytesPerS : kDefaultCpuMemoryBytesPerS);
  s.overhead_s = d.measured_op_overhead_s() > 0
                     ? d.measured_op_overhead_s()
                     : (gpu ? kGpuOverheadS : kCpuOverheadS) * s.slowdown;
  s.step_overhead_s = std::max(0.0, d.measured_step_overhead_s());
  s.transport_wakeup_s = std::max(0.0, d.measured_transport_wakeup_s());
  s.transport_spin_s = std::max(0.0, d.measured_transport_spin_s());
  return s;
}

absl::StatusOr<CostModel> CostModel::Create(const Graph* graph, const Topology* topology) {
  CostModel m;
  m.graph_ = graph;
  m.topology_ = topology;
  m.shared_collectives_ = std::make_shared<SharedCollectives>();
  for (const Op& op : graph->ops) {
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    if (schema == nullptr) return absl::InvalidArgumentError("unknown op type " + op.type);
    const OpCost c1 = EstimateOpCost(*graph, op, *schema, 1);
    const OpCost c2 = EstimateOpCost(*graph, op, *schema, 2);
    OpCostLine line;
    line.flops_per_row = c2.flops - c1.flops;
    line.flops_base = c1.flops - line.flops_per_row;
    line.bytes_per_row = c2.bytes - c1.bytes;
    line.bytes_base = c1.bytes - line.bytes_per_row;
    m.costs_.push_back(line);
    bool batched = false;
    for (const std::string& t : op.outputs) {
      const TensorInfo* info = graph->FindTensor(t);
      batched |= info != nullptr && info->shape.HasBatch();
    }
    for (const std::string& t : op.inputs) {
      const TensorInfo* info = t.empty() ? nullptr : graph->FindTensor(t);
      batched |= info != nullptr && info->shape.HasBatch();
    }
    m.batched_.push_back(batched);
  }
  std::map<std::string, int> op_index;
  for (size_t i = 0; i < graph->ops.size(); ++i) op_index[graph->ops[i].name] = static_cast<int>(i);
  // Op types with a measured rate on some device: an index per op.
  std::map<std::string, int> type_index;
  for (const DeviceEntry& d : topology->devices()) {
    for (const quilt::v1::OpTypeRate& r : d.proto.measured_op_type_rates()) {
      if (r.flops_per_s() > 0) type_index.emplace(r.op_type(), static_cast<int>(type_index.size()));
    }
  }
  if (!type_index.empty()) {
    m.op_type_.assign(graph->ops.size(), -1);
    for (size_t i = 0; i < graph->ops.size(); ++i) {
      auto it = type_index.find(graph->ops[i].type);
      if (it != type_index.end()) m.op_type_[i] = it->second;
    }
  }
  for (const DeviceEntry& d : topology->devices()) {
    m.speeds_.push_back(SpeedOf(d.proto));
    std::vector<double>& rates = m.type_rates_.emplace_back(type_index.size(), 0.0);
    for (const quilt::v1::OpTypeRate& r : d.proto.measured_op_type_rates()) {
      if (r.flops_per_s() > 0) rates[type_index.at(r.op_type())] = r.flops_per_s();
    }
    std::vector<std::vector<std::pair<int64_t, double>>> table;
    if (d.proto.op_times_size() > 0) {
      table.resize(graph->ops.size());
      for (const quilt::v1::OpTiming& t : d.proto.op_times()) {
        auto it = op_index.find(t.op());
        if (it != op_index.end()) {
          table[it->second].push_back({t.batch(), t.time_s()});
        } else {
          for (size_t i = 0; i < graph->ops.size(); ++i) {
            if (graph->ops[i].type == t.op()) table[i].push_back({t.batch(), t.time_s()});
          }
        }
      }
      for (auto& entries : table) std::sort(entries.begin(), entries.end());
    }
    m.tables_.push_back(std::move(table));
  }
  return m;
}

CostModel CostModel::Composite(const Graph* coarse, const CostModel* fine,
                               std::vector<std::vector<int>> members) {
  CostModel m;
  m.graph_ = coarse;
  m.topology_ = fine->topology_;
  m.speeds_ = fine->speeds_;
  m.type_rates_ = fine->type_rates_;
  m.tables_.resize(fine->speeds_.size());
  m.fine_ = fine;
  for (const std::vector<int>& ops : members) {
    bool batched = false;
    for (int i : ops) batched |= fine->batched_[i];
    m.batched_.push_back(batched);
  }
  m.costs_.resize(members.size());
  m.members_ = std::move(members);
  return m;
}

double CostModel::PeakFlopsPerS(int device) const {
  double peak = speeds_[device].flops_per_s;
  if (device < static_cast<int>(type_rates_.size())) {
    for (double r : type_rates_[device]) peak = std::max(peak, r);
  }
  return peak;
}

double CostModel::Flops(int op, int64_t rows) const {
  if (fine_ != nullptr) {
    double f = 0;
    for (int i : members_[op]) f += fine_->Flops(i, rows);
    return f;
  }
  const OpCostLine& c = costs_[op];
  return c.flops_base + c.flops_per_row * static_cast<double>(batched_[op] ? rows : 1);
}

double CostModel::FlopRate(int op, int device) const {
  if (!op_type_.empty() && op_type_[op] >= 0 && type_rates_[device][op_type_[op]] > 0) {
    return type_rates_[device][op_type_[op]];
  }
  return speeds_[device].flops_per_s;
}

double CostModel::OpTime(int op, int device, int64_t rows) const {
  const int64_t b = batched_[op] ? rows : 1;
  if (fine_ != nullptr) {
    const uint64_t key = (static_cast<uint64_t>(op) << 44) ^ (static_cast<uint64_t>(device) << 32) ^
                         static_cast<uint64_t>(b);
    auto [it, fresh] = composite_time_.emplace(key, 0.0);
    if (fresh) {
      double t = 0;
      for (int i : members_[op]) t += fine_->OpTime(i, device, b);
      it->second = t;
    }
    return it->second;
  }
  const auto& table = tables_[device];
  if (!table.empty() && !table[op].empty()) {
    const auto& e = table[op];
    // An op without the batch (an update, a weight's transform) takes what
    // it was measured to take, at whatever batch that was.
    if (!batched_[op]) return e.back().second;
    // Linear between measured batches; proportional outside them.
    if (b <= e.front().first) return e.front().second * b / std::max<int64_t>(1, e.front().first);
    if (b >= e.back().first) return e.back().second * b / std::max<int64_t>(1, e.back().first);
    for (size_t i = 1; i < e.size(); ++i) {
      if (b <= e[i].first) {
        const double f = double(b - e[i - 1].first) / double(e[i].first - e[i - 1].first);
        return e[i - 1].second + f * (e[i].second - e[i - 1].second);
      }
    }
  }
  const OpCostLine& c = costs_[op];
  const DeviceSpeed& s = speeds_[device];
  const double flops = c.flops_base + c.flops_per_row * static_cast<double>(b);
  const double bytes = c.bytes_base + c.bytes_per_row * static_cast<double>(b);
  const double rate = FlopRate(op, device);
  return s.overhead_s + std::max(flops / rate, bytes * s.slowdown / s.memory_bytes_per_s);
}

double CostModel::LeastTimePerRow(int op, int device, int64_t max_rows) const {
  if (!batched_[op]) return OpTime(op, device, 1);
  max_rows = std::max<int64_t>(1, max_rows);
  if (fine_ != nullptr) {
    // The members' least rates may fall at different counts: their sum is
    // no more than the composite's least rate. A member without the batch
    // adds its time over at most max_rows rows.
    double t = 0;
    for (int i : members_[op]) {
      t += fine_->batched_[i] ? fine_->LeastTimePerRow(i, device, max_rows)
                              : fine_->OpTime(i, device, 1) / static_cast<double>(max_rows);
    }
    return t;
  }
  // OpTime(r) / r is monotone between the counts below: the table's
  // measured batches (it is linear between them), or where the roofline's
  // two affine terms cross (each is affine on either side).
  std::vector<int64_t> counts = {1, max_rows};
  const auto& table = tables_[device];
  if (!table.empty() && !table[op].empty()) {
    for (const auto& [b, t] : table[op]) {
      if (b >= 1 && b <= max_rows) counts.push_back(b);
    }
  } else {
    const OpCostLine& c = costs_[op];
    const DeviceSpeed& s = speeds_[device];
    const double rate = FlopRate(op, device);
    const double mem = s.memory_bytes_per_s / s.slowdown;
    const double slope = c.flops_per_row / rate - c.bytes_per_row / mem;
    if (slope != 0) {
      const double cross = (c.bytes_base / mem - c.flops_base / rate) / slope;
      if (cross > 1 && cross < static_cast<double>(max_rows)) {
        counts.push_back(static_cast<int64_t>(std::floor(cross)));
        counts.push_back(static_cast<int64_t>(std::ceil(cross)));
      }
    }
  }
  double least = std::numeric_limits<double>::infinity();
  for (int64_t r : counts) least = std::min(least, OpTime(op, device, r) / static_cast<double>(r));
  return least;
}

CostModel::Collective CostModel::Ring(const std::vector<int>& devices, double bytes,
                                      double steps) const {
  // `steps` sequential steps, each moving bytes/n over every ring hop at
  // once: a step lasts as long as the slowest hop.
  Collective c;
  const size_t n = devices.size();
  if (n < 2) return c;
  double worst = 0;
  ResourceSet res(topology_->num_resources());
  for (size_t i = 0; i < n; ++i) {
    const Path& p = topology_->PathBetween(devices[i], devices[(i + 1) % n]);
    worst = std::max(worst, p.Time(bytes / n));
    res.Add(p.resources);
  }
  c.resources = res.Take();
  c.time_s = steps * worst;
  return c;
}

CostModel::Collective CostModel::AllReduce(quilt::v1::AggregationMethod method,
                                           const std::vector<int>& devices, double bytes) const {
  if (devices.size() < 2) return ComputeAllReduce(method, devices, bytes);
  std::vector<int64_t> key;
  key.reserve(devices.size() + 2);
  key.push_back(static_cast<int64_t>(method));
  int64_t bits = 0;
  static_assert(sizeof(bits) == sizeof(bytes));
  std::memcpy(&bits, &bytes, sizeof(bits));
  key.push_back(bits);
  key.insert(key.end(), devices.begin(), devices.end());
  if (fine_ == nullptr) {
    if (shared_collectives_ == nullptr) return ComputeAllReduce(method, devices, bytes);
    SharedCollectives& cache = *shared_collectives_;
    {
      absl::MutexLock lock(&cache.mu);
      if (auto it = cache.map.find(key); it != cache.map.end()) return it->second;
    }
    Collective c = ComputeAllReduce(method, devices, bytes);
    absl::MutexLock lock(&cache.mu);
    return cache.map.try_emplace(std::move(key), std::move(c)).first->second;
  }
  auto it = collectives_.find(key);
  if (it == collectives_.end()) {
    it = collectives_.emplace(std::move(key), ComputeAllReduce(method, devices, bytes)).first;
  }
  return it->second;
}

CostModel::Collective CostModel::ComputeAllReduce(quilt::v1::AggregationMethod method,
                                                  const std::vector<int>& devices,
                                                  double bytes) const {
  const int n = static_cast<int>(devices.size());
  if (n < 2) return {};
  if (method == quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE) {
    // Binary tree (member i's parent is (i - 1) / 2, as the runtime builds
    // it): whole messages up to member 0, then back down, ⌊log₂ n⌋ levels.
    // A parent's children send at once: their latencies overlap, their
    // bytes share the parent's side (and back down, its sending side), so a
    // level lasts as long as the busiest parent's longest latency plus its
    // children's bytes.
    Collective c;
    ResourceSet res(topology_->num_resources());
    std::vector<double> latency(n, 0.0), transfer(n, 0.0);
    for (int i = 1; i < n; ++i) {
      const int parent = (i - 1) / 2;
      const Path& p = topology_->PathBetween(devices[i], devices[parent]);
      if (!p.resources.empty()) {
        latency[parent] = std::max(latency[parent], p.latency_s);
        transfer[parent] += bytes / p.bandwidth_bytes_per_s;
      }
      res.Add(p.resources);
      res.Add(topology_->PathBetween(devices[parent], devices[i]).resources);
    }
    c.resources = res.Take();
    double level_worst = 0;
    for (int i = 0; i < n; ++i) level_worst = std::max(level_worst, latency[i] + transfer[i]);
    const int levels = static_cast<int>(std::floor(std::log2(static_cast<double>(n))));
    c.time_s = 2.0 * levels * level_worst;
    return c;
  }
  if (method == quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE) {
    return Hierarchical(devices, bytes);
  }
  if (method == quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE) {
    // Every member's buffer to every other member at once: the longest
    // latency, then the most loaded resource's bytes (a node's NIC carries
    // its members' buffers to every member elsewhere).
    Collective c;
    std::vector<int> uses;  // a resource once per buffer it carries
    double latency = 0;
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        const Path& p = topology_->PathBetween(devices[a], devices[b]);
        latency = std::max(latency, p.latency_s);
        uses.insert(uses.end(), p.resources.begin(), p.resources.end());
      }
    }
    std::sort(uses.begin(), uses.end());
    double busiest = 0;
    for (size_t i = 0, j = 0; i < uses.size(); i = j) {
      while (j < uses.size() && uses[j] == uses[i]) ++j;
      busiest = std::max(busiest, static_cast<double>(j - i) * bytes /
                                      topology_->resource(uses[i]).bandwidth_bytes_per_s);
      c.resources.push_back(uses[i]);
    }
    c.time_s = latency + busiest;
    return c;
  }
  return Ring(devices, bytes, 2.0 * (n - 1));
}

CostModel::Collective CostModel::Hierarchical(const std::vector<int>& devices, double bytes) const {
  // The runtime's two-level all-reduce (src/common/hierarchical_layout.h):
  // per piece, the members of each node send every shard to its owner,
  // the owners of each shard exchange it across the nodes, and the owners
  // send the sums back. The pieces pipeline: the step takes one piece
  // through the three phases, then a slowest phase per further piece.
  const int n = static_cast<int>(devices.size());
  // Members by node, nodes in ascending order (as the runtime's layout
  // numbers them), members in ring order.
  std::vector<std::pair<int, int>> keyed;  // (node, position in `devices`)
  keyed.reserve(n);
  for (int i = 0; i < n; ++i) keyed.push_back({topology_->device(devices[i]).node, i});
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<int>> by_node;
  for (size_t i = 0; i < keyed.size(); ++i) {
    if (i == 0 || keyed[i].first != keyed[i - 1].first) by_node.emplace_back();
    by_node.back().push_back(devices[keyed[i].second]);
  }
  const int nodes = static_cast<int>(by_node.size());
  int min_members = n;
  for (const std::vector<int>& ds : by_node) {
    min_members = std::min(min_members, static_cast<int>(ds.size()));
  }
  const HierarchicalLayout layout =
      LayoutHierarchical(nodes, min_members, static_cast<int64_t>(bytes / 4));
  const int s = layout.shards;
  const double piece = bytes / layout.pieces;
  Collective c;
  ResourceSet res(topology_->num_resources());
  double within = 0;  // reducing into the owners (sending back mirrors it)
  for (const std::vector<int>& ds : by_node) {
    const int g = static_cast<int>(ds.size());
    if (g < 2) continue;
    for (int m = 0; m < g; ++m) {
      // A member sends every shard it does not own; an owner receives its
      // shard from every other member.
      const double out = piece * (m < s ? s - 1 : s) / s;
      const double in = m < s ? piece * (g - 1) / s : 0;
      double bandwidth = std::numeric_limits<double>::infinity(), latency = 0;
      for (int k = 0; k < g; ++k) {
        if (k == m) continue;
        // (Each ordered pair's path once: the other direction is the
        // other member's.)
        const Path& p = topology_->PathBetween(ds[m], ds[k]);
        res.Add(p.resources);
        for (const Path* q : {&p, &topology_->PathBetween(ds[k], ds[m])}) {
          if (q->resources.empty()) continue;
          bandwidth = std::min(bandwidth, q->bandwidth_bytes_per_s);
          latency = std::max(latency, q->latency_s);
        }
      }
      if (std::isfinite(bandwidth)) {
        within = std::max(within, latency + std::max(out, in) / bandwidth);
      }
    }
  }
  // Across the nodes, per piece (src/common/hierarchical_layout.h): each
  // owner sends every other node's part of its shard to that node's owner,
  // sums its own part from theirs, then sends the sum back to them all;
  // the shards together load node k's NIC (or its owners' links, where
  // narrower) as one shard of the whole piece would. A piece alone takes
  // two phases, each a latency and the busiest NIC's bytes; each further
  // piece, while pieces overlap, the busiest NIC's bytes of both phases
  // through each of its sides (`steady`).
  std::vector<double> nic(nodes);
  for (int k = 0; k < nodes; ++k) {
    nic[k] = topology_->NodeBytesPerS(topology_->device(by_node[k][0]).node, s);
  }
  const std::vector<double> shares = ExchangeShares(nic, layout.pieces);
  double phase = 0, steady = 0;
  for (int k = 0; k < nodes && nodes > 1; ++k) {
    double latency = 0;
    for (int l = 0; l < nodes; ++l) {
      if (l == k) continue;
      for (int j = 0; j < s; ++j) {
        const Path& p = topology_->PathBetween(by_node[k][j], by_node[l][j]);
        res.Add(p.resources);
        latency = std::max(latency, p.latency_s);
      }
    }
    const double f = shares.empty() ? 1.0 / nodes : shares[k];
    phase = std::max(phase, latency + std::max(1 - f, (nodes - 1) * f) * piece / nic[k]);
    steady = std::max(steady, (1 + (nodes - 2) * f) * piece / nic[k]);
  }
  const double first = 2 * phase;
  c.resources = res.Take();
  // All pieces start at once: in the steady state a member's links carry
  // one piece's sums in and another's sums back out at the same time.
  c.time_s = 2 * within + first + (layout.pieces - 1) * std::max(2 * within, steady);
  return c;
}

}  // namespace quilt
