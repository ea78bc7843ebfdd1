#include "src/planner/lower_bound.h"

#include <algorithm>
#include <cmath>
#include <coin/ClpSimplex.hpp>
#include <coin/CoinPackedVector.hpp>
#include <limits>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "src/graph/op_registry.h"

namespace quilt {
namespace {

// The dual's value at per-device weights y ≥ 0: Σ_o min_k y_k work[o][k]
// with the weights scaled to Σ_k devices[k] y_k = 1. Weak duality makes it
// a lower bound on the program's optimum for any such weights.
double DualValue(const std::vector<std::vector<double>>& work, const std::vector<int>& devices,
                 std::vector<double> y) {
  double scale = 0;
  for (size_t k = 0; k < y.size(); ++k) scale += devices[k] * std::max(0.0, y[k]);
  if (!(scale > 0) || !std::isfinite(scale)) return 0;
  for (double& v : y) v = std::max(0.0, v) / scale;
  double total = 0;
  for (const std::vector<double>& row : work) {
    double least = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < y.size(); ++k) least = std::min(least, y[k] * row[k]);
    total += least;
  }
  return total;
}

// Ops whose work is proportional across the classes split alike at the
// optimum, so the program is solved over their directions (rounded: the
// weights it returns are only a candidate, valued over the real ops).
std::vector<std::vector<double>> MergeByDirection(const std::vector<std::vector<double>>& work) {
  std::map<std::vector<int64_t>, std::vector<double>> merged;
  for (const std::vector<double>& row : work) {
    double sum = 0;
    for (double v : row) sum += v;
    if (!(sum > 0)) continue;
    std::vector<int64_t> key;
    for (double v : row) key.push_back(std::llround(v / sum * 1e4));
    std::vector<double>& m = merged[key];
    m.resize(row.size(), 0.0);
    for (size_t k = 0; k < row.size(); ++k) m[k] += row[k];
  }
  std::vector<std::vector<double>> out;
  for (auto& [key, row] : merged) out.push_back(std::move(row));
  return out;
}

// Past this many of the program's columns, the starting weights alone are
// used (the solve would cost more than a plan's other steps).
constexpr int64_t kMaxColumns = 200000;
constexpr double kSolveSeconds = 1.0;

// The program's optimal per-class weights (the capacity rows' duals), or
// empty when the solver finds none.
std::vector<double> SolveWeights(const std::vector<std::vector<double>>& work,
                                 const std::vector<int>& devices) {
  const int rows = static_cast<int>(work.size());
  const int classes = static_cast<int>(devices.size());
  if (static_cast<int64_t>(rows) * classes >= kMaxColumns) return {};
  const int cols = rows * classes + 1;  // x[o][k] (share of op o on class k), T
  std::vector<double> collb(cols, 0.0), colub(cols, COIN_DBL_MAX), obj(cols, 0.0);
  obj[cols - 1] = 1.0;
  CoinPackedMatrix m(false, 0, 0);
  m.setDimensions(0, cols);
  std::vector<double> rowlb, rowub;
  for (int o = 0; o < rows; ++o) {
    CoinPackedVector share;
    for (int k = 0; k < classes; ++k) share.insert(o * classes + k, 1.0);
    m.appendRow(share);
    rowlb.push_back(1.0);
    rowub.push_back(1.0);
  }
  for (int k = 0; k < classes; ++k) {
    CoinPackedVector load;
    for (int o = 0; o < rows; ++o) load.insert(o * classes + k, work[o][k]);
    load.insert(cols - 1, -static_cast<double>(devices[k]));
    m.appendRow(load);
    rowlb.push_back(-COIN_DBL_MAX);
    rowub.push_back(0.0);
  }
  ClpSimplex lp;
  lp.setLogLevel(0);
  // Any weights give a bound: a solver stopped short still gives some.
  lp.setMaximumSeconds(kSolveSeconds);
  lp.loadProblem(m, collb.data(), colub.data(), obj.data(), rowlb.data(), rowub.data());
  lp.primal();
  const double* dual = lp.dualRowSolution();
  if (dual == nullptr) return {};
  std::vector<double> y(classes);
  // A capacity row's dual is the step's change per second more capacity:
  // ≤ 0, its weight is the negation.
  for (int k = 0; k < classes; ++k) y[k] = -dual[rows + k];
  return y;
}

}  // namespace

double FlopsLowerBound(const Graph& g, const CostModel& cost, const Topology& topo, int64_t batch) {
  // The forward and backward ops' FLOPs (a backward pass is not always
  // twice the forward: the first layer computes no input gradient).
  double flops = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const OpSchema* s = OpRegistry::Global().Find(g.ops[i].type);
    if (s->is_update) continue;
    flops += cost.Flops(static_cast<int>(i), batch);
  }
  double rate = 0;
  for (int d = 0; d < topo.num_devices(); ++d) rate += cost.PeakFlopsPerS(d);
  return rate > 0 ? flops / rate : 0;
}

double BalanceBound(const std::vector<std::vector<double>>& work, const std::vector<int>& devices) {
  const size_t classes = devices.size();
  if (work.empty() || classes == 0) return 0;
  // Start: weights inverse to each class's whole work, the bound when every
  // op runs equally fast relative to the others on each class.
  std::vector<double> start(classes, 0.0);
  for (size_t k = 0; k < classes; ++k) {
    double whole = 0;
    for (const std::vector<double>& row : work) whole += row[k];
    if (!(whole > 0)) return 0;  // a class does everything in no time
    start[k] = 1.0 / whole;
  }
  double best = DualValue(work, devices, start);
  const std::vector<double> y = SolveWeights(MergeByDirection(work), devices);
  if (!y.empty()) best = std::max(best, DualValue(work, devices, y));
  return best;
}

double BalanceLowerBound(const Graph& g, const CostModel& cost, const Topology& topo,
                         int64_t batch) {
  const int n = topo.num_devices();
  const int ops = static_cast<int>(g.ops.size());
  if (n == 0 || ops == 0) return 0;
  // Devices with equal costs for every op form one class.
  absl::flat_hash_map<std::vector<double>, int> class_of;
  std::vector<std::vector<double>> columns;
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) {
    std::vector<double> col(ops);
    for (int o = 0; o < ops; ++o) {
      const double t = cost.Batched(o)
                           ? static_cast<double>(batch) * cost.LeastTimePerRow(o, d, batch)
                           : cost.LeastTimePerRow(o, d, batch);
      // (Zero for a time the model cannot give: still a bound.)
      col[o] = std::isfinite(t) && t > 0 ? t : 0;
    }
    auto [it, fresh] = class_of.emplace(col, static_cast<int>(columns.size()));
    if (fresh) {
      columns.push_back(std::move(col));
      devices.push_back(0);
    }
    ++devices[it->second];
  }
  // Equal ops add up: one row per distinct cost vector.
  std::map<std::vector<double>, double> rows;
  for (int o = 0; o < ops; ++o) {
    std::vector<double> row(columns.size());
    for (size_t k = 0; k < columns.size(); ++k) row[k] = columns[k][o];
    rows[row] += 1;
  }
  std::vector<std::vector<double>> work;
  for (const auto& [row, count] : rows) {
    work.push_back(row);
    for (double& v : work.back()) v *= count;
  }
  return BalanceBound(work, devices);
}

double ComputeLowerBound(const Graph& g, const CostModel& cost, const Topology& topo,
                         int64_t batch) {
  // (Not the larger of the two: a measured op-time table may beat the
  // FLOP bound's peak rate. On the roofline, the balance bound lies above.)
  return BalanceLowerBound(g, cost, topo, batch);
}

}  // namespace quilt
