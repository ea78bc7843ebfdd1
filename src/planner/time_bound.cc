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
      group_gradients_(coarse.num_groups()),
      group_crossings_(coarse.num_groups()) {
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
    gradients_.push_back({group->second, from->second,
                          static_cast<double>(RangeBytes(g.tensors()[grad], 0, 0)), grad});
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
  for (size_t i = 0; i < gradients_.size(); ++i) {
    group_gradients_[gradients_[i].group].push_back(i);
    if (gradients_[i].producer != gradients_[i].group) {
      group_gradients_[gradients_[i].producer].push_back(i);
    }
  }
  for (size_t c = 0; c < crossings_.size(); ++c) {
    group_crossings_[crossings_[c].producer].push_back(c);
    for (int k : crossings_[c].readers) group_crossings_[k].push_back(c);
  }
}

const TimeBound::Loads& TimeBound::Compute(int k, int option,
                                           const std::vector<PlacementOption>& options) {
  if (compute_.size() <= static_cast<size_t>(option)) compute_.resize(option + 1);
  if (compute_[option].empty()) compute_[option].resize(ops_.size());
  std::optional<Loads>& out = compute_[option][k];
  if (out.has_value()) return *out;
  out.emplace();
  // Devices the split gives no rows do nothing in the group (Place).
  const CostModel& cost = coarse_.cost();
  for (const Slice& s : Slices(option, options)) {
    double seconds = 0;
    for (const auto& [op, batched] : ops_[k]) {
      seconds += cost.OpTime(op, s.device, batched ? s.end - s.begin : 0);
    }
    out->push_back({s.device, seconds});
  }
  return *out;
}

const TimeBound::Loads& TimeBound::Links(int g, int option,
                                         const std::vector<PlacementOption>& options,
                                         Method method) {
  auto [it, fresh] = links_.try_emplace({g, option, method});
  Loads& out = it->second;
  if (!fresh || method == Method::kParameterServer) return out;
  std::vector<int> devices;
  for (const Slice& s : Slices(option, options)) devices.push_back(s.device);
  if (devices.size() < 2) return out;
  SortByNode(topo_, &devices);
  const CostModel::Collective c =
      coarse_.cost().AllReduce(ProtoMethod(method), devices, gradients_[g].bytes);
  for (int r : c.resources) out.push_back({r, c.time_s});
  return out;
}

const TimeBound::Loads& TimeBound::ServerLinks(int g, const PlanState& state,
                                               const std::vector<PlacementOption>& options) {
  const Gradient& grad = gradients_[g];
  const int from = state.place[grad.producer], own = state.place[grad.group];
  auto [it, fresh] = server_links_.try_emplace({g, from, own, state.ServerNode(grad.group)});
  Loads& out = it->second;
  if (!fresh) return out;
  // As the lowering shards a parameter (Place): rows of dim 0 evenly.
  const std::vector<int> servers = servers_(state, grad.group);
  const TensorInfo& info = coarse_.graph().tensors()[grad.tensor];
  const int64_t rows = info.shape.rank() == 0 ? 1 : std::max<int64_t>(1, info.shape.dim(0).value);
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(servers.size()), rows);
  std::vector<double> held(topo_.num_resources(), 0.0);
  auto add = [&](int a, int b, double bytes) {
    if (a == b) return;
    const Path& path = topo_.PathBetween(a, b);
    const double seconds = path.Time(bytes);
    for (int r : path.resources) held[r] += seconds;
  };
  for (int64_t j = 0; j < n; ++j) {
    const int server = servers[j];
    const double bytes = static_cast<double>(RangeBytes(info, rows * j / n, rows * (j + 1) / n));
    for (const Slice& w : Slices(from, options)) add(w.device, server, bytes);
    for (const Slice& r : Slices(own, options)) add(server, r.device, bytes);
  }
  for (size_t r = 0; r < held.size(); ++r) {
    if (held[r] > 0) out.push_back({static_cast<int>(r), held[r]});
  }
  return out;
}

const std::vector<Slice>& TimeBound::Slices(int option,
                                            const std::vector<PlacementOption>& options) {
  // Sized for every option at once: a reference returned before stays valid.
  if (slices_.size() < options.size()) slices_.resize(options.size());
  std::optional<std::vector<Slice>>& out = slices_[option];
  if (!out.has_value()) out = SplitBatch(options[option].replicas, batch_);
  return *out;
}

const std::vector<TimeBound::Received>& TimeBound::Moved(
    int c, int from, int to, const std::vector<PlacementOption>& options) {
  auto [it, fresh] = moved_.try_emplace({c, from, to});
  std::vector<Received>& out = it->second;
  if (!fresh) return out;
  const TensorInfo& info = coarse_.graph().tensors()[crossings_[c].tensor];
  const std::vector<Slice>& made = Slices(from, options);
  // Both splits run through the rows in order: the sources that overlap a
  // need follow those of the need before it.
  size_t first = 0;
  for (const Slice& need : Slices(to, options)) {
    bool own = false;
    moved_links_.clear();
    while (first < made.size() && made[first].end <= need.begin) ++first;
    for (size_t i = first; i < made.size() && made[i].begin < need.end; ++i) {
      const Slice& src = made[i];
      own |= src.device == need.device && src.begin == need.begin && src.end == need.end;
      const int64_t b = std::max(src.begin, need.begin), e = std::min(src.end, need.end);
      if (b >= e || src.device == need.device) continue;
      const Path& path = topo_.PathBetween(src.device, need.device);
      const double seconds = path.Time(static_cast<double>(RangeBytes(info, b, e)));
      for (int link : path.resources) moved_links_.push_back({link, seconds});
    }
    if (!own && !moved_links_.empty()) {
      out.push_back(
          {need.device, need.begin, need.end, Loads(moved_links_.begin(), moved_links_.end())});
    }
  }
  return out;
}

void TimeBound::Clear(Sums* sums) const {
  sums->devices.assign(topo_.num_devices(), 0.0);
  sums->links.assign(topo_.num_resources(), 0.0);
  sums->overhead = 0;
}

double TimeBound::Sums::Total() const {
  double most = 0;
  for (double s : devices) most = std::max(most, s);
  for (double s : links) most = std::max(most, s);
  return most + overhead;
}

void TimeBound::AddGroup(int k, const PlanState& state, const std::vector<PlacementOption>& options,
                         Sums* sums) {
  if (k >= static_cast<int>(state.place.size())) return;
  const int option = state.place[k];
  for (const auto& [d, seconds] : Compute(k, option, options)) {
    sums->devices[d] += seconds;
    sums->overhead = std::max(sums->overhead, coarse_.cost().speed(d).step_overhead_s);
  }
}

void TimeBound::AddGradient(size_t i, const PlanState& state,
                            const std::vector<PlacementOption>& options, Sums* sums) {
  const Gradient& grad = gradients_[i];
  if (grad.group >= static_cast<int>(state.place.size()) ||
      grad.producer >= static_cast<int>(state.place.size())) {
    return;
  }
  const int option = state.place[grad.producer];
  if (state.method[grad.group] == Method::kParameterServer) {
    if (!servers_) return;
    for (const auto& [r, seconds] : ServerLinks(static_cast<int>(i), state, options)) {
      sums->links[r] += seconds;
    }
    return;
  }
  for (const auto& [r, seconds] :
       Links(static_cast<int>(i), option, options, state.method[grad.group])) {
    sums->links[r] += seconds;
  }
}

void TimeBound::AddCrossing(size_t c, const PlanState& state,
                            const std::vector<PlacementOption>& options, Sums* sums) {
  // Each instance a reader needs is moved once, whichever readers need it.
  const Crossing& x = crossings_[c];
  if (x.producer >= static_cast<int>(state.place.size())) return;
  const int from = state.place[x.producer];
  seen_options_.clear();
  seen_.clear();
  for (int k : x.readers) {
    if (k >= static_cast<int>(state.place.size())) continue;
    const int to = state.place[k];
    if (to == from ||
        std::find(seen_options_.begin(), seen_options_.end(), to) != seen_options_.end()) {
      continue;
    }
    const bool first = seen_options_.empty();
    seen_options_.push_back(to);
    for (const Received& r : Moved(static_cast<int>(c), from, to, options)) {
      if (!first && std::any_of(seen_.begin(), seen_.end(), [&](const Received* s) {
            return s->device == r.device && s->begin == r.begin && s->end == r.end;
          })) {
        continue;
      }
      seen_.push_back(&r);
      for (const auto& [link, seconds] : r.links) sums->links[link] += seconds;
    }
  }
}

double TimeBound::Of(const PlanState& state, const std::vector<PlacementOption>& options) {
  Clear(&sums_);
  for (size_t k = 0; k < ops_.size(); ++k) AddGroup(static_cast<int>(k), state, options, &sums_);
  for (size_t i = 0; i < gradients_.size(); ++i) AddGradient(i, state, options, &sums_);
  for (size_t c = 0; c < crossings_.size(); ++c) AddCrossing(c, state, options, &sums_);
  return sums_.Total();
}

std::vector<double> TimeBound::OfEach(const PlanState& state, int k,
                                      const std::vector<std::pair<int, Method>>& choices,
                                      const std::vector<PlacementOption>& options) {
  std::vector<double> out;
  if (k < 0 || k >= static_cast<int>(ops_.size()) || k >= static_cast<int>(state.place.size())) {
    for (size_t i = 0; i < choices.size(); ++i) {
      PlanState next = state;
      if (k >= 0 && k < static_cast<int>(next.place.size())) {
        next.place[k] = choices[i].first;
        next.method[k] = choices[i].second;
      }
      out.push_back(Of(next, options));
    }
    return out;
  }
  // What involves no choice of group k, once.
  Clear(&base_);
  for (size_t g = 0; g < ops_.size(); ++g) {
    if (static_cast<int>(g) != k) AddGroup(static_cast<int>(g), state, options, &base_);
  }
  const std::vector<size_t>& grads = group_gradients_[k];
  const std::vector<size_t>& crossings = group_crossings_[k];
  for (size_t i = 0, j = 0; i < gradients_.size(); ++i) {
    if (j < grads.size() && grads[j] == i) {
      ++j;
    } else {
      AddGradient(i, state, options, &base_);
    }
  }
  for (size_t c = 0, j = 0; c < crossings_.size(); ++c) {
    if (j < crossings.size() && crossings[j] == c) {
      ++j;
    } else {
      AddCrossing(c, state, options, &base_);
    }
  }
  PlanState next = state;
  for (const auto& [option, method] : choices) {
    next.place[k] = option;
    next.method[k] = method;
    sums_ = base_;
    AddGroup(k, next, options, &sums_);
    for (size_t i : grads) AddGradient(i, next, options, &sums_);
    for (size_t c : crossings) AddCrossing(c, next, options, &sums_);
    out.push_back(sums_.Total());
  }
  return out;
}

}  // namespace quilt
