#include "src/planner/baselines.h"

#include <coin/ClpSimplex.hpp>
#include <coin/CoinPackedVector.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/graph/op_registry.h"

namespace quilt {
namespace {

int64_t TensorBytes(const Graph& g, const std::string& name, int64_t batch) {
  const TensorInfo* t = g.FindTensor(name);
  return t ? t->shape.NumElements(batch) * DTypeSize(t->dtype) : 0;
}

}  // namespace

std::vector<std::string> ForwardOps(const Graph& g) {
  std::vector<std::string> out;
  for (const Op& op : g.ops) {
    if (op.forward_op.empty()) out.push_back(op.name);
  }
  return out;
}

std::vector<DeviceLoadModel> FitLoadModels(const Graph& g, const CostModel& cost,
                                           const Topology& topo) {
  // Memory: parameters, gradients and optimizer state whole; activations by
  // the rows. A conservative estimate: every batch tensor of the training
  // graph held at once is too pessimistic, the forward activations (kept for
  // the backward pass) plus the largest gradient tensor are what peaks.
  int64_t fixed = 0, per_row = 0, largest_grad = 0;
  for (const TensorInfo& t : g.tensors()) {
    const int64_t b1 = t.shape.NumElements(1) * DTypeSize(t.dtype);
    switch (t.role) {
      case TensorRole::kParameter:
      case TensorRole::kOptimizerState:
      case TensorRole::kConstant:
        fixed += b1;
        break;
      case TensorRole::kGradient:
        if (t.shape.HasBatch()) {
          largest_grad = std::max(largest_grad, b1);
        } else {
          fixed += b1;
        }
        break;
      default:
        if (t.shape.HasBatch()) per_row += b1;
        break;
    }
  }
  (void)TensorBytes;
  std::vector<DeviceLoadModel> out;
  for (int d = 0; d < topo.num_devices(); ++d) {
    DeviceLoadModel m;
    double t1 = 0, t2 = 0;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      t1 += cost.OpTime(static_cast<int>(i), d, 1);
      t2 += cost.OpTime(static_cast<int>(i), d, 2);
    }
    m.t1 = t2 - t1;
    m.t0 = t1 - m.t1;
    m.m0 = static_cast<double>(fixed);
    m.m1 = static_cast<double>(per_row + 2 * largest_grad);
    out.push_back(m);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ProportionalSplit(const std::vector<DeviceLoadModel>& load,
                                                       const Topology& topo, int64_t batch,
                                                       bool* used_lp) {
  const int n = topo.num_devices();
  *used_lp = false;
  std::vector<double> cap(n), rows(n);
  double speed_sum = 0;
  for (int d = 0; d < n; ++d) {
    const double mem = static_cast<double>(topo.device(d).proto.memory_bytes());
    cap[d] = load[d].m1 > 0 ? (mem - load[d].m0) / load[d].m1 : 1e18;
    speed_sum += 1.0 / std::max(load[d].t1, 1e-15);
  }
  bool fits = true;
  for (int d = 0; d < n; ++d) {
    rows[d] = batch * (1.0 / std::max(load[d].t1, 1e-15)) / speed_sum;
    fits &= rows[d] <= cap[d];
  }
  if (!fits) {
    // min T  s.t.  t0_d + t1_d·b_d <= T,  Σ b_d = B,  0 <= b_d <= cap_d.
    *used_lp = true;
    ClpSimplex lp;
    lp.setLogLevel(0);
    const int cols = n + 1;  // b_0..b_{n-1}, T
    std::vector<double> collb(cols, 0.0), colub(cols), obj(cols, 0.0);
    for (int d = 0; d < n; ++d) colub[d] = std::max(0.0, std::min<double>(cap[d], batch));
    colub[n] = COIN_DBL_MAX;
    obj[n] = 1.0;
    CoinPackedMatrix m(false, 0, 0);
    m.setDimensions(0, cols);
    std::vector<double> rowlb, rowub;
    for (int d = 0; d < n; ++d) {
      CoinPackedVector row;
      row.insert(d, load[d].t1);
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
      return absl::FailedPreconditionError(absl::StrFormat(
          "no split of the batch of %d fits the devices' memory", batch));
    }
    const double* sol = lp.primalColumnSolution();
    for (int d = 0; d < n; ++d) rows[d] = sol[d];
  }
  // Integer rows: floors, then the remainder to the largest fractions that
  // still fit.
  std::vector<int64_t> out(n);
  int64_t total = 0;
  for (int d = 0; d < n; ++d) {
    out[d] = static_cast<int64_t>(std::floor(rows[d] + 1e-9));
    total += out[d];
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return rows[a] - out[a] > rows[b] - out[b] || (rows[a] - out[a] == rows[b] - out[b] && a < b);
  });
  for (int k = 0; total < batch && k < 4 * n; ++k) {
    const int d = order[k % n];
    if (out[d] + 1 <= cap[d] + 1e-9 || !fits) {
      ++out[d];
      ++total;
    }
  }
  if (total != batch) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no split of the batch of %d fits the devices' memory", batch));
  }
  return out;
}

quilt::v1::Strategy DataParallelStrategy(const Graph& g, const Topology& topo,
                                         const std::vector<int64_t>& rows,
                                         quilt::v1::AggregationMethod method,
                                         const std::string& name) {
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
  // Parameter servers: each parameter on one of the used devices, largest
  // first onto the least loaded (by bytes).
  std::vector<std::pair<int64_t, std::string>> params;
  for (const ParameterSpec& p : g.parameters) {
    if (p.frozen) continue;
    params.push_back({g.FindTensor(p.tensor)->shape.NumElements(1), p.tensor});
  }
  std::sort(params.begin(), params.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<int64_t> load(used.size(), 0);
  for (const auto& [size, name_p] : params) {
    auto* a = s.add_aggregations();
    a->set_parameter(name_p);
    a->set_method(method);
    if (method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
      const size_t k = std::min_element(load.begin(), load.end()) - load.begin();
      load[k] += size;
      a->add_servers(topo.device(used[k]).id);
    }
  }
  return s;
}

std::vector<NamedStrategy> Baselines(const Graph& g, const Topology& topo, const CostModel& cost,
                                     int64_t batch) {
  const int n = topo.num_devices();
  std::vector<NamedStrategy> out;
  // Single device: the fastest.
  int best = 0;
  for (int d = 1; d < n; ++d) {
    if (cost.speed(d).flops_per_s > cost.speed(best).flops_per_s) best = d;
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
  bool used_lp = false;
  absl::StatusOr<std::vector<int64_t>> prop =
      ProportionalSplit(FitLoadModels(g, cost, topo), topo, batch, &used_lp);
  for (auto [name, method] : {std::pair{"dp-proportional-ring", quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE},
                              std::pair{"dp-proportional-ps", quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER}}) {
    NamedStrategy ns;
    ns.name = name;
    if (prop.ok()) {
      ns.strategy = DataParallelStrategy(g, topo, *prop, method, name);
    } else {
      ns.infeasible_reason = std::string(prop.status().message());
    }
    out.push_back(std::move(ns));
  }
  return out;
}

double ComputeLowerBound(const Graph& g, const CostModel& cost, const Topology& topo,
                         int64_t batch) {
  double flops = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const OpSchema* s = OpRegistry::Global().Find(g.ops[i].type);
    if (!g.ops[i].forward_op.empty() || s->is_update) continue;
    flops += cost.Flops(static_cast<int>(i), batch);
  }
  double rate = 0;
  for (int d = 0; d < topo.num_devices(); ++d) rate += cost.speed(d).flops_per_s;
  return rate > 0 ? 3.0 * flops / rate : 0;
}

}  // namespace quilt
