#include "src/planner/memory_share.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/graph_index.h"
#include "src/planner/lower.h"
#include "src/planner/memory_floor.h"
#include "src/planner/priorities.h"
#include "src/sim/simulator.h"

namespace quilt {

namespace {

// The most one execution order is taken to save over the other.
constexpr double kOrderGain = 1.25;

struct InFull {
  bool fits = false;
  double fraction = 0;  // its fullest device's peak over its memory
  double step_s = 0;    // in the faster order
};

absl::StatusOr<InFull> SimulateInFull(const Graph& g, const GraphIndex& index, const Topology& topo,
                                      const CostModel& cost, int64_t batch, const ShareCandidate& c,
                                      double step_at_least_s) {
  InFull out;
  quilt::v1::Strategy fine = c.baseline->strategy;
  SimOptions options;
  options.index = &index;
  // (Memory in the start's order, the one the search judged it in; the
  // step in the faster order, as the baselines are compared, where that
  // can take it below step_at_least_s: a full simulation costs seconds on
  // large clusters.)
  auto simulate = [&](quilt::v1::ExecutionOrder order) -> absl::StatusOr<SimResult> {
    fine.set_order(order);
    ASSIGN_OR_RETURN(quilt::v1::DistributedProgram p, Lower(index, fine, topo, &cost, batch));
    return Simulate(p, g, topo, cost, options);
  };
  ASSIGN_OR_RETURN(SimResult full, simulate(c.state.order));
  for (const DeviceUsage& u : full.devices) {
    if (u.capacity_bytes <= 0) continue;
    if (u.peak_memory_bytes > u.capacity_bytes) return out;  // over in full too
    out.fraction = std::max(out.fraction, static_cast<double>(u.peak_memory_bytes) /
                                              static_cast<double>(u.capacity_bytes));
  }
  out.fits = true;
  out.step_s = full.step_time_s;
  if (step_at_least_s <= 0 || out.step_s < step_at_least_s ||
      out.step_s >= kOrderGain * step_at_least_s) {
    return out;
  }
  for (quilt::v1::ExecutionOrder order : kExecutionOrders) {
    if (order == c.state.order) continue;
    ASSIGN_OR_RETURN(SimResult other, simulate(order));
    out.step_s = std::min(out.step_s, other.step_time_s);
  }
  return out;
}

// Whether two strategies differ in their names alone.
bool SameSplit(quilt::v1::Strategy a, quilt::v1::Strategy b) {
  a.clear_name();
  b.clear_name();
  return a.SerializeAsString() == b.SerializeAsString();
}

}  // namespace

std::vector<ShareCandidate> PickShareCandidates(
    const Topology& topo,
    const std::vector<std::pair<const NamedStrategy*, std::pair<PlanState, Score>>>& starts,
    size_t most, double memory_fraction) {
  // Bytes between the share and whole memory, in all.
  const double above_share = (1 - memory_fraction) * static_cast<double>(TotalMemoryBytes(topo));
  auto near = starts;
  near.erase(
      std::remove_if(near.begin(), near.end(),
                     [&](const auto& s) { return s.second.second.overflow_bytes > above_share; }),
      near.end());
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) {
    return a.second.second.BetterThan(b.second.second);
  });
  std::vector<ShareCandidate> out;
  for (const auto& [baseline, scored] : near) {
    if (out.size() >= most) break;
    if (std::any_of(out.begin(), out.end(), [&](const ShareCandidate& c) {
          return SameSplit(c.baseline->strategy, baseline->strategy);
        })) {
      continue;
    }
    out.push_back({scored.first, baseline});
  }
  return out;
}

absl::StatusOr<ShareRaise> RaiseShareToStarts(SearchSpace* space, const Graph& g,
                                              const Topology& topo, const CostModel& cost,
                                              int64_t batch,
                                              const std::vector<ShareCandidate>& candidates,
                                              double memory_fraction, double step_at_least_s) {
  ShareRaise out;
  if (candidates.empty()) return out;
  ASSIGN_OR_RETURN(const GraphIndex index, GraphIndex::Build(g));
  std::vector<double> caps(topo.num_devices(), 0.0);
  std::vector<std::string> fitting;
  for (const ShareCandidate& c : candidates) {
    ASSIGN_OR_RETURN(InFull full, SimulateInFull(g, index, topo, cost, batch, c, step_at_least_s));
    if (!full.fits) {
      out.over_in_full.push_back(c.baseline->name);
      continue;
    }
    fitting.push_back(c.baseline->name);
    out.full_fraction = std::max(out.full_fraction, full.fraction);
    out.full_step_s = out.full_step_s > 0 ? std::min(out.full_step_s, full.step_s) : full.step_s;
    ASSIGN_OR_RETURN(std::vector<double> peaks, space->CoarsePeaks(c.state));
    for (int d = 0; d < topo.num_devices(); ++d) caps[d] = std::max(caps[d], peaks[d]);
  }
  if (fitting.empty()) return out;
  for (int d = 0; d < topo.num_devices(); ++d) {
    const double share = memory_fraction * static_cast<double>(topo.device(d).proto.memory_bytes());
    if (topo.device(d).proto.memory_bytes() > 0 && caps[d] > share) ++out.devices;
  }
  if (out.devices == 0) return out;  // over the share for no device: nothing to raise
  space->RaiseMemoryCaps(caps);
  out.raised = true;
  // "a", "a and b", "a, b and c".
  std::string names = fitting.back();
  if (fitting.size() > 1) {
    names = absl::StrCat(absl::StrJoin(fitting.begin(), fitting.end() - 1, ", "), " and ", names);
  }
  out.description = absl::StrFormat(
      "%s %s over the search's %d %% share of memory on its coarse model but %s in full (the "
      "fullest device at %d %% of its memory): the search let each device hold as much as %s "
      "%s there (%d %s above the share)",
      names, fitting.size() == 1 ? "is" : "are",
      static_cast<int>(std::lround(100 * memory_fraction)), fitting.size() == 1 ? "fits" : "fit",
      static_cast<int>(std::lround(100 * out.full_fraction)), names,
      fitting.size() == 1 ? "does" : "do", out.devices, out.devices == 1 ? "device" : "devices");
  return out;
}

}  // namespace quilt
