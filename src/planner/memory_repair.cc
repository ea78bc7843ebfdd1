#include "src/planner/memory_repair.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/common/units.h"
#include "src/common/work_clock.h"
#include "src/graph/graph_index.h"
#include "src/planner/lower.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

// Devices with the most room a group may move to, besides its neighbours'
// placements.
constexpr int kRoomiestDevices = 3;

struct FullScore {
  double step_s = 0;
  double over_bytes = 0;
  std::vector<double> room;  // per device: capacity − peak (negative: over)
  bool fits() const { return over_bytes <= 0; }
  // As a move from `now`, better than `o`: one that fits before one that
  // does not, then the faster; of two that do not, the less over.
  bool BetterThan(const FullScore& o) const {
    if (fits() != o.fits()) return fits();
    return fits() ? step_s < o.step_s : over_bytes < o.over_bytes;
  }
  // Whether it is a move from `now` at all: less over.
  bool Improves(const FullScore& now) const { return over_bytes < now.over_bytes; }
};

class FullJudge {
 public:
  FullJudge(SearchSpace* space, const Graph& g, const GraphIndex& index, const Topology& topo,
            const CostModel& cost, int64_t batch, int64_t fusion)
      : space_(space),
        g_(g),
        index_(index),
        topo_(topo),
        cost_(cost),
        batch_(batch),
        fusion_(fusion) {}

  absl::StatusOr<FullScore> Of(const PlanState& state) {
    return Of(space_->FineStrategy(g_, state, "heterog", fusion_));
  }
  absl::StatusOr<FullScore> Of(const quilt::v1::Strategy& s) {
    ++simulated_;
    ASSIGN_OR_RETURN(quilt::v1::DistributedProgram p, Lower(index_, s, topo_, &cost_, batch_));
    SimOptions options;
    options.index = &index_;
    ASSIGN_OR_RETURN(SimResult r, Simulate(p, g_, topo_, cost_, options));
    FullScore score;
    score.step_s = r.step_time_s;
    score.room.assign(topo_.num_devices(), 0);
    for (int d = 0; d < topo_.num_devices(); ++d) {
      score.room[d] = static_cast<double>(topo_.device(d).proto.memory_bytes());
    }
    for (const DeviceUsage& u : r.devices) {
      const int d = topo_.DeviceIndex(u.device);
      if (d < 0 || u.capacity_bytes <= 0) continue;
      score.room[d] = static_cast<double>(u.capacity_bytes - u.peak_memory_bytes);
      score.over_bytes += std::max(0.0, -score.room[d]);
    }
    return score;
  }
  int simulated() const { return simulated_; }

 private:
  SearchSpace* space_;
  const Graph& g_;
  const GraphIndex& index_;
  const Topology& topo_;
  const CostModel& cost_;
  int64_t batch_;
  int64_t fusion_;
  int simulated_ = 0;
};

// The placements group k may move to off the devices over memory: its
// neighbours' and the roomiest devices' alone, none holding such a device.
std::vector<int> Destinations(SearchSpace* space, const PlanState& state, int k,
                              const FullScore& score) {
  auto clear = [&](int option) {
    for (const auto& [d, r] : space->options()[option].replicas) {
      if (score.room[d] < 0) return false;
    }
    return true;
  };
  std::vector<int> out;
  auto add = [&](int option) {
    if (option != state.place[k] && clear(option) &&
        std::find(out.begin(), out.end(), option) == out.end()) {
      out.push_back(option);
    }
  };
  const int groups = static_cast<int>(state.place.size());
  if (k > 0) add(state.place[k - 1]);
  if (k + 1 < groups) add(state.place[k + 1]);
  std::vector<int> devices(score.room.size());
  for (size_t d = 0; d < devices.size(); ++d) devices[d] = static_cast<int>(d);
  std::sort(devices.begin(), devices.end(),
            [&](int a, int b) { return score.room[a] > score.room[b]; });
  for (int i = 0; i < kRoomiestDevices && i < static_cast<int>(devices.size()); ++i) {
    if (score.room[devices[i]] > 0) add(space->SingleOption(devices[i]));
  }
  return out;
}

// Whether `s` lowers to a program that validates.
bool Validates(const GraphIndex& index, const quilt::v1::Strategy& s, const Topology& topo,
               const CostModel& cost, int64_t batch) {
  absl::StatusOr<quilt::v1::DistributedProgram> p = Lower(index, s, topo, &cost, batch);
  return p.ok() && ValidateProgram(*p, index, topo).ok();
}

// The devices of a group.
std::vector<int> DevicesOf(const Topology& topo, const quilt::v1::GroupPlacement& group) {
  std::vector<int> out;
  for (const auto& r : group.replicas()) out.push_back(topo.DeviceIndex(r.device()));
  return out;
}

// Shifts runs of forward ops from groups with a device over its memory to
// a neighbouring group whose devices all have room (RepairMemory's second
// stage), each round the best such run; appends one OpMove per op moved
// (a run's moves together) and updates `score`.
template <typename OutOfTime>
absl::Status ShiftOps(FullJudge* judge, const GraphIndex& index, const Topology& topo,
                      const OutOfTime& out_of_time, quilt::v1::Strategy* fine, FullScore* score,
                      std::vector<OpMove>* moves) {
  while (!score->fits() && !out_of_time()) {
    std::optional<std::pair<std::vector<OpMove>, FullScore>> best;
    const int groups = fine->groups_size();
    for (int a = 0; a < groups && !out_of_time(); ++a) {
      const std::vector<int> from = DevicesOf(topo, fine->groups(a));
      if (std::none_of(from.begin(), from.end(),
                       [&](int d) { return d >= 0 && score->room[d] < 0; }))
        continue;
      for (int b : {a - 1, a + 1}) {
        if (b < 0 || b >= groups) continue;
        const std::vector<int> to = DevicesOf(topo, fine->groups(b));
        if (to.empty() ||
            !std::all_of(to.begin(), to.end(), [&](int e) { return e >= 0 && score->room[e] > 0; }))
          continue;
        const int n = fine->groups(a).ops_size();
        for (int run = 1; run < n && !out_of_time(); run *= 2) {
          // To the group before: a's first ops, at its end; to the one
          // after: a's last ops, at its front (the last first).
          std::vector<OpMove> shift;
          for (int i = 0; i < run; ++i) {
            const int at = b < a ? i : n - 1 - i;
            shift.push_back({fine->groups(a).ops(at), fine->groups(b).group(), b < a});
          }
          quilt::v1::Strategy moved = *fine;
          ApplyOpMoves(index, shift, &moved);
          absl::StatusOr<FullScore> s = judge->Of(moved);
          if (!s.ok()) continue;  // (a plan that does not lower is no move)
          if (!s->Improves(*score)) continue;
          if (!best.has_value() || s->BetterThan(best->second)) best.emplace(shift, *s);
        }
      }
    }
    if (!best.has_value()) break;
    ApplyOpMoves(index, best->first, fine);
    moves->insert(moves->end(), best->first.begin(), best->first.end());
    *score = best->second;
  }
  return absl::OkStatus();
}

}  // namespace

void ApplyOpMoves(const GraphIndex& index, const std::vector<OpMove>& moves,
                  quilt::v1::Strategy* strategy) {
  std::map<std::string, int> aggregation;  // parameter → its entry
  for (int i = 0; i < strategy->aggregations_size(); ++i) {
    aggregation[strategy->aggregations(i).parameter()] = i;
  }
  // The op named so (null: none).
  auto op_named = [&](const std::string& name) -> const Op* {
    const int i = index.OpIndex(name);
    return i < 0 ? nullptr : &index.graph().ops[i];
  };
  // The entry of a parameter an op of `group` reads (null: none).
  auto template_of =
      [&](const quilt::v1::GroupPlacement& group) -> const quilt::v1::ParameterAggregation* {
    for (const std::string& name : group.ops()) {
      const Op* op = op_named(name);
      if (op == nullptr) continue;
      for (const std::string& t : op->inputs) {
        if (auto a = aggregation.find(t); a != aggregation.end()) {
          return &strategy->aggregations(a->second);
        }
      }
    }
    return nullptr;
  };
  for (const OpMove& m : moves) {
    quilt::v1::GroupPlacement* to = nullptr;
    for (auto& group : *strategy->mutable_groups()) {
      if (group.group() == m.to) to = &group;
    }
    if (to == nullptr) continue;
    bool found = false;
    for (auto& group : *strategy->mutable_groups()) {
      auto* list = group.mutable_ops();
      for (int i = 0; i < list->size() && !found; ++i) {
        if (list->Get(i) != m.op) continue;
        list->erase(list->begin() + i);
        found = true;
      }
    }
    if (!found) continue;
    // Its parameters aggregated as the group's others (a copy: the
    // entries may move).
    std::optional<quilt::v1::ParameterAggregation> like;
    if (const quilt::v1::ParameterAggregation* t = template_of(*to)) like = *t;
    to->add_ops(m.op);
    if (!m.at_end) {
      auto* list = to->mutable_ops();
      std::rotate(list->begin(), list->end() - 1, list->end());
    }
    const Op* op = op_named(m.op);
    if (!like.has_value() || op == nullptr) continue;
    for (const std::string& t : op->inputs) {
      auto a = aggregation.find(t);
      if (a == aggregation.end()) continue;
      quilt::v1::ParameterAggregation* entry = strategy->mutable_aggregations(a->second);
      *entry = *like;
      entry->set_parameter(t);
    }
  }
}

std::string DescribeRepair(const RepairOutcome& r, double seconds) {
  auto count = [](int n, const char* one, const char* many) {
    return absl::StrFormat("%d %s", n, n == 1 ? one : many);
  };
  std::vector<std::string> did;
  if (r.moves > 0) did.push_back("moving " + count(r.moves, "group", "groups"));
  if (r.served > 0) {
    did.push_back("serving the parameters of " + count(r.served, "group", "groups") + " otherwise");
  }
  if (r.shifts > 0) {
    did.push_back("shifting " + count(r.shifts, "op", "ops") + " to neighbouring groups");
  }
  std::string what = absl::StrJoin(did.begin(), did.end() - (did.size() > 1 ? 1 : 0), ", ");
  if (did.size() > 1) what += " and " + did.back();
  return absl::StrFormat(
      "%s (%s simulated in full, %.2f s%s)",
      what.empty() ? std::string(r.fits ? "it fits as it is"
                                        : "no move off the devices over their memory helped")
      : r.fits
          ? what + " off the devices over their memory made it fit"
          : what + " left it " + HumanBytes(static_cast<int64_t>(r.over_bytes)) + " over, in all",
      count(r.simulated, "plan", "plans"), seconds,
      r.ended_by_time ? "; ended by its time limit, so on a faster machine or with a longer "
                        "--time-budget it may go further"
                      : "");
}

absl::StatusOr<RepairOutcome> RepairMemory(SearchSpace* space, const GraphIndex& index,
                                           const Topology& topo, const CostModel& cost,
                                           int64_t batch, const PlanState& start,
                                           absl::Time deadline, int max_simulations,
                                           int64_t fusion) {
  const Graph& g = index.graph();
  FullJudge judge(space, g, index, topo, cost, batch, fusion);
  RepairOutcome out;
  out.state = start;
  ASSIGN_OR_RETURN(FullScore score, judge.Of(start));
  std::set<std::string> seen = {space->StateKey(start)};
  auto out_of_time = [&] { return WorkNow() >= deadline || judge.simulated() >= max_simulations; };
  while (!score.fits() && !out_of_time()) {
    std::optional<std::pair<PlanState, FullScore>> best;
    for (int k = 0; k < static_cast<int>(out.state.place.size()) && !out_of_time(); ++k) {
      const PlacementOption& here = space->options()[out.state.place[k]];
      bool on_full = false;
      for (const auto& [d, r] : here.replicas) on_full |= score.room[d] < 0;
      if (!on_full) continue;
      std::vector<PlanState> candidates;
      for (int option : Destinations(space, out.state, k, score)) {
        candidates.push_back(out.state);
        PlanState& moved = candidates.back();
        moved.place[k] = option;
        if (!space->Allows(option, moved.method[k])) moved.method[k] = Method::kRing;
        SetServerNode(&moved, k, -1);
      }
      // A replicated group's parameters served elsewhere: on a server node
      // (its parameters, gradients and optimizer state leave the devices),
      // or by another method (sharded rather than replicated, or back).
      if (!here.single()) {
        for (Method m : space->MethodsFor(out.state.place[k])) {
          if (m != out.state.method[k]) {
            candidates.push_back(out.state);
            candidates.back().method[k] = m;
            SetServerNode(&candidates.back(), k, -1);
          }
        }
        for (int node : space->ServerNodes()) {
          if (node == out.state.ServerNode(k) || space->OnlyOn(out.state.place[k], node)) continue;
          candidates.push_back(out.state);
          candidates.back().method[k] = Method::kParameterServer;
          SetServerNode(&candidates.back(), k, node);
        }
      }
      for (const PlanState& moved : candidates) {
        if (out_of_time()) break;
        if (!seen.insert(space->StateKey(moved)).second) continue;
        absl::StatusOr<FullScore> s = judge.Of(moved);
        if (!s.ok()) continue;  // (a plan that does not lower is no move)
        if (!s->Improves(score)) continue;
        if (!best.has_value() || s->BetterThan(best->second)) best.emplace(moved, *s);
      }
    }
    if (!best.has_value()) break;
    (best->first.place == out.state.place ? out.served : out.moves) += 1;
    out.state = best->first;
    score = best->second;
  }
  if (!score.fits() && !out_of_time()) {
    quilt::v1::Strategy fine = space->FineStrategy(g, out.state, "heterog", fusion);
    const FullScore unshifted = score;
    RETURN_IF_ERROR(ShiftOps(&judge, index, topo, out_of_time, &fine, &score, &out.op_moves));
    // The plan with its ops shifted is validated as the plan's result
    // will be (each shift was only simulated); one that does not validate
    // is not kept.
    if (!out.op_moves.empty() && !Validates(index, fine, topo, cost, batch)) {
      out.op_moves.clear();
      score = unshifted;
    }
    out.shifts = static_cast<int>(out.op_moves.size());
  }
  out.fits = score.fits();
  out.step_s = score.step_s;
  out.over_bytes = score.over_bytes;
  out.simulated = judge.simulated();
  out.ended_by_time = !out.fits && WorkNow() >= deadline && out.simulated < max_simulations;
  return out;
}

}  // namespace quilt
