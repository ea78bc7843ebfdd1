#include "src/planner/time_bound.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "src/planner/lower.h"
#include "src/planner/placement.h"
#include "src/planner/search_space.h"

namespace quilt {

TimeBound::TimeBound(const CoarseModel& coarse, const Topology& topo, int64_t batch)
    : coarse_(coarse),
      topo_(topo),
      batch_(batch),
      ops_(coarse.num_groups()),
      devices_(topo.num_devices()),
      links_held_(topo.num_resources()) {
  const Graph& g = coarse.graph();
  const GraphIndex& ix = coarse.index();
  absl::flat_hash_map<std::string, int> group_of;
  for (int k = 0; k < coarse.num_groups(); ++k) group_of[coarse.ForwardOp(k)] = k;
  // Per tensor: the op that writes it, and whether that op is split by rows.
  std::vector<int> producer(g.tensors().size(), -1);
  std::vector<bool> split(g.ops.size(), false);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const int op = static_cast<int>(i);
    if (ix.Schema(op).is_update) continue;
    for (int t : ix.Outputs(op)) producer[t] = op;
    auto it = group_of.find(GroupKey(g.ops[i]));
    if (it == group_of.end()) continue;  // no group: nothing to charge
    split[op] = SplitByRows(ix, op);
    ops_[it->second].push_back({op, split[op]});
  }
  // A gradient an op split by rows produces is a partial sum on each of
  // its devices, summed by its parameter's method (the update's group's).
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const int op = static_cast<int>(i);
    if (!ix.Schema(op).is_update || ix.Inputs(op).size() < 2) continue;
    const int grad = ix.Inputs(op)[1];
    if (grad < 0 || producer[grad] < 0 || !split[producer[grad]]) continue;
    auto group = group_of.find(GroupKey(g.ops[i]));
    auto from = group_of.find(GroupKey(g.ops[producer[grad]]));
    if (group == group_of.end() || from == group_of.end()) continue;
    gradients_.push_back(
        {group->second, from->second, static_cast<double>(RangeBytes(g.tensors()[grad], 0, 0))});
  }
  // Batch tensors read across groups: each reader's rows come from the
  // producer's instances (Lowerer::Provide), once per instance needed.
  std::vector<int> crossing(g.tensors().size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const int op = static_cast<int>(i);
    if (ix.Schema(op).is_update) continue;
    auto reader = group_of.find(GroupKey(g.ops[i]));
    if (reader == group_of.end()) continue;
    for (int t : ix.Inputs(op)) {
      if (t < 0 || !ix.Batched(t) || producer[t] < 0 || !split[producer[t]]) continue;
      auto from = group_of.find(GroupKey(g.ops[producer[t]]));
      if (from == group_of.end() || from->second == reader->second) continue;
      if (crossing[t] < 0) {
        crossing[t] = static_cast<int>(crossings_.size());
        crossings_.push_back({t, from->second, {}});
      }
      std::vector<int>& readers = crossings_[crossing[t]].readers;
      if (std::find(readers.begin(), readers.end(), reader->second) == readers.end())
        readers.push_back(reader->second);
    }
  }
}

const TimeBound::Loads& TimeBound::Compute(int k, int option, const PlacementOption& o) {
  if (compute_.size() <= static_cast<size_t>(option)) compute_.resize(option + 1);
  if (compute_[option].empty()) compute_[option].resize(ops_.size());
  std::optional<Loads>& out = compute_[option][k];
  if (out.has_value()) return *out;
  out.emplace();
  // Devices the split gives no rows do nothing in the group (Place).
  const CostModel& cost = coarse_.cost();
  for (const Slice& s : SplitBatch(o.replicas, batch_)) {
    double seconds = 0;
    for (const auto& [op, batched] : ops_[k]) {
      seconds += cost.OpTime(op, s.device, batched ? s.end - s.begin : 0);
    }
    out->push_back({s.device, seconds});
  }
  return *out;
}

const TimeBound::Loads& TimeBound::Links(int g, int option, const PlacementOption& o,
                                         Method method) {
  auto [it, fresh] = links_.try_emplace({g, option, method});
  Loads& out = it->second;
  if (!fresh || method == Method::kParameterServer) return out;
  std::vector<int> devices;
  for (const Slice& s : SplitBatch(o.replicas, batch_)) devices.push_back(s.device);
  if (devices.size() < 2) return out;
  SortByNode(topo_, &devices);
  const CostModel::Collective c =
      coarse_.cost().AllReduce(ProtoMethod(method), devices, gradients_[g].bytes);
  for (int r : c.resources) out.push_back({r, c.time_s});
  return out;
}

const std::vector<TimeBound::Received>& TimeBound::Moved(
    int c, int from, int to, const std::vector<PlacementOption>& options) {
  auto [it, fresh] = moved_.try_emplace({c, from, to});
  std::vector<Received>& out = it->second;
  if (!fresh) return out;
  const TensorInfo& info = coarse_.graph().tensors()[crossings_[c].tensor];
  const std::vector<Slice> made = SplitBatch(options[from].replicas, batch_);
  for (const Slice& need : SplitBatch(options[to].replicas, batch_)) {
    Received r{need.device, need.begin, need.end, {}};
    bool own = false;
    for (const Slice& src : made) {
      own |= src.device == need.device && src.begin == need.begin && src.end == need.end;
      const int64_t b = std::max(src.begin, need.begin), e = std::min(src.end, need.end);
      if (b >= e || src.device == need.device) continue;
      const Path& path = topo_.PathBetween(src.device, need.device);
      const double seconds = path.Time(static_cast<double>(RangeBytes(info, b, e)));
      for (int link : path.resources) r.links.push_back({link, seconds});
    }
    if (!own && !r.links.empty()) out.push_back(std::move(r));
  }
  return out;
}

bool TimeBound::Tally::Add(int i, double s, int now) {
  const bool fresh = call[i] != now;
  if (fresh) {
    call[i] = now;
    seconds[i] = 0;
  }
  seconds[i] += s;
  most = std::max(most, seconds[i]);
  return fresh;
}

double TimeBound::Of(const PlanState& state, const std::vector<PlacementOption>& options) {
  ++calls_;
  devices_.most = 0;
  links_held_.most = 0;
  double overhead = 0;
  for (size_t k = 0; k < ops_.size() && k < state.place.size(); ++k) {
    const int option = state.place[k];
    const PlacementOption& o = options[option];
    for (const auto& [d, seconds] : Compute(static_cast<int>(k), option, o)) {
      if (devices_.Add(d, seconds, calls_)) {
        overhead = std::max(overhead, coarse_.cost().speed(d).step_overhead_s);
      }
    }
  }
  for (size_t i = 0; i < gradients_.size(); ++i) {
    const Gradient& grad = gradients_[i];
    if (grad.group >= static_cast<int>(state.place.size()) ||
        grad.producer >= static_cast<int>(state.place.size())) {
      continue;
    }
    const int option = state.place[grad.producer];
    for (const auto& [r, seconds] :
         Links(static_cast<int>(i), option, options[option], state.method[grad.group])) {
      links_held_.Add(r, seconds, calls_);
    }
  }
  // Each instance a reader needs is moved once, whichever readers need it.
  std::vector<int> seen_options;
  std::vector<const Received*> seen;
  for (size_t c = 0; c < crossings_.size(); ++c) {
    const Crossing& x = crossings_[c];
    if (x.producer >= static_cast<int>(state.place.size())) continue;
    const int from = state.place[x.producer];
    seen_options.clear();
    seen.clear();
    for (int k : x.readers) {
      if (k >= static_cast<int>(state.place.size())) continue;
      const int to = state.place[k];
      if (to == from ||
          std::find(seen_options.begin(), seen_options.end(), to) != seen_options.end()) {
        continue;
      }
      const bool first = seen_options.empty();
      seen_options.push_back(to);
      for (const Received& r : Moved(static_cast<int>(c), from, to, options)) {
        if (!first && std::any_of(seen.begin(), seen.end(), [&](const Received* s) {
              return s->device == r.device && s->begin == r.begin && s->end == r.end;
            })) {
          continue;
        }
        seen.push_back(&r);
        for (const auto& [link, seconds] : r.links) links_held_.Add(link, seconds, calls_);
      }
    }
  }
  return std::max(devices_.most, links_held_.most) + overhead;
}

}  // namespace quilt
