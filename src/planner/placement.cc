#include "src/planner/placement.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"
#include "src/planner/lookups.h"
#include "src/planner/weight_gradients.h"

namespace quilt {

const std::string& GroupKey(const Op& op) {
  return op.forward_op.empty() ? op.name : op.forward_op;
}

bool SplitByRows(const GraphIndex& ix, int op) {
  for (int t : ix.Outputs(op)) {
    if (ix.Batched(t)) return true;
  }
  for (int t : ix.Inputs(op)) {
    if (t >= 0 && ix.Batched(t)) return true;
  }
  return false;
}

std::vector<Slice> SplitBatch(const std::vector<std::pair<int, int>>& replicas, int64_t batch) {
  int64_t total = 0;
  for (const auto& [d, r] : replicas) total += r;
  std::vector<Slice> out;
  if (total <= 0) return out;
  // Rows in proportion to the counts: each device its whole share, the
  // rows left over one each to the largest fractions (ties: the most
  // replicas, then the earlier).
  std::vector<int64_t> rows;
  std::vector<size_t> by_fraction;
  int64_t given = 0;
  for (const auto& [d, r] : replicas) {
    rows.push_back(batch * r / total);
    given += rows.back();
    by_fraction.push_back(by_fraction.size());
  }
  std::stable_sort(by_fraction.begin(), by_fraction.end(), [&](size_t a, size_t b) {
    const int64_t ra = batch * replicas[a].second % total, rb = batch * replicas[b].second % total;
    return ra != rb ? ra > rb : replicas[a].second > replicas[b].second;
  });
  for (size_t k = 0; given < batch && k < by_fraction.size(); ++k, ++given) ++rows[by_fraction[k]];
  int64_t begin = 0;
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (rows[i] > 0) out.push_back({replicas[i].first, begin, begin + rows[i]});
    begin += rows[i];
  }
  return out;
}

namespace {

// Group `gi`'s split of its weight-gradient ops over `reps` (the devices its
// other ops run on, with rows): empty when it sets none.
absl::StatusOr<std::vector<std::pair<int, int>>> WeightGradientSplit(
    const quilt::v1::GroupPlacement& gp, int gi, const std::vector<std::pair<int, int>>& reps,
    const Topology& topo, int64_t batch) {
  std::vector<std::pair<int, int>> wg;
  if (gp.weight_gradient_replicas().empty()) return wg;
  for (const quilt::v1::DeviceReplicas& r : gp.weight_gradient_replicas()) {
    const int d = topo.DeviceIndex(r.device());
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("group ", gi,
                                                     "'s weight_gradient_replicas name unknown "
                                                     "device '",
                                                     r.device(), "'"));
    }
    if (r.replicas() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", gi, "'s weight_gradient_replicas give device '", r.device(), "' ",
                       r.replicas(), " replicas: each device of the group keeps at least one"));
    }
    wg.push_back({d, r.replicas()});
  }
  bool same = wg.size() == reps.size();
  for (size_t k = 0; same && k < wg.size(); ++k) same = wg[k].first == reps[k].first;
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", gi,
        "'s weight_gradient_replicas must name the devices its replicas give rows, in the same "
        "order"));
  }
  const std::vector<Slice> rows = SplitBatch(wg, batch);
  if (rows.size() < wg.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", gi, "'s weight_gradient_replicas give a device no rows of the global batch of ",
        batch));
  }
  return wg;
}

}  // namespace

absl::StatusOr<Placement> PlaceSmallerMicroBatches(const GraphIndex& ix,
                                                   const quilt::v1::Strategy& s,
                                                   const Topology& topo, const Placement& larger) {
  // Each group's counts made the rows the larger split gives: split again
  // at one row less, by the largest remainders, every device keeps its rows
  // but the last of those with the most.
  quilt::v1::Strategy smaller = s;
  auto as_rows = [&](const std::vector<std::pair<int, int>>& reps,
                     google::protobuf::RepeatedPtrField<quilt::v1::DeviceReplicas>* out) {
    out->Clear();
    for (const Slice& r : SplitBatch(reps, larger.global_batch)) {
      auto* d = out->Add();
      d->set_device(topo.device(r.device).id);
      d->set_replicas(static_cast<int32_t>(r.end - r.begin));
    }
  };
  for (int gi = 0; gi < smaller.groups_size() && gi < static_cast<int>(larger.groups.size());
       ++gi) {
    auto* gp = smaller.mutable_groups(gi);
    as_rows(larger.groups[gi], gp->mutable_replicas());
    if (!larger.weight_gradient_groups[gi].empty()) {
      as_rows(larger.weight_gradient_groups[gi], gp->mutable_weight_gradient_replicas());
    }
  }
  ASSIGN_OR_RETURN(Placement q, Place(ix, smaller, topo, larger.global_batch - 1));
  // A table gathered by sparse lookup keeps its devices (each computes its
  // lookups' part over the whole micro-batch): where every device of its
  // group had one row, the one that has none now still holds it.
  std::map<std::string, std::vector<int>> tables;
  for (const auto& [name, pp] : larger.params) {
    if (pp.method != quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP) continue;
    ParamPlacement& mine = q.params.at(name);
    if (mine.devices == pp.devices) continue;
    if (tables.empty()) tables = LookupTables(ix);
    mine.devices = pp.devices;
    for (int op : tables.at(name)) {
      q.op_slices[op].clear();
      for (int d : pp.devices) q.op_slices[op].push_back({d, 0, q.global_batch});
    }
    const int t = ix.Tensor(name);
    for (int op = 0; op < static_cast<int>(q.op_slices.size()); ++op) {
      if (!ix.Schema(op).is_update || ix.Inputs(op)[0] != t) continue;
      q.op_slices[op].clear();
      for (int d : pp.devices) q.op_slices[op].push_back({d, 0, 0});
    }
  }
  return q;
}

absl::StatusOr<Placement> Place(const Graph& g, const quilt::v1::Strategy& s, const Topology& topo,
                                int64_t batch) {
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  return Place(ix, s, topo, batch);
}

namespace {

// What the strategy says that needs no graph: known enum values, group ids
// that are their positions (or all left 0), no negative buckets, and no
// op priorities (the lowering ranks instructions by the execution order).
absl::Status CheckStrategyFields(const quilt::v1::Strategy& s) {
  if (!quilt::v1::ExecutionOrder_IsValid(s.order())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the strategy's execution order ", static_cast<int>(s.order()), " is none Quilt knows"));
  }
  if (s.priorities_size() > 0) {
    return absl::InvalidArgumentError(
        "the strategy gives op priorities, which Quilt does not read: instructions are ranked by "
        "its execution order (order); remove them");
  }
  bool ids_given = false;
  for (const quilt::v1::GroupPlacement& gp : s.groups()) ids_given |= gp.group() != 0;
  for (int gi = 0; ids_given && gi < s.groups_size(); ++gi) {
    if (s.groups(gi).group() != gi) {
      return absl::InvalidArgumentError(absl::StrCat("the strategy's group at position ", gi,
                                                     " has id ", s.groups(gi).group(),
                                                     ": a group's id is its position, 0-based"));
    }
  }
  for (const quilt::v1::ParameterAggregation& a : s.aggregations()) {
    if (!quilt::v1::AggregationMethod_IsValid(a.method())) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", a.parameter(), "' has aggregation method ",
                       static_cast<int>(a.method()), ", which is none Quilt knows"));
    }
    if (a.bucket() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", a.parameter(), "' has negative bucket ", a.bucket()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Placement> Place(const GraphIndex& ix, const quilt::v1::Strategy& s,
                                const Topology& topo, int64_t batch) {
  if (batch <= 0) return absl::InvalidArgumentError("the global batch must be positive");
  RETURN_IF_ERROR(CheckStrategyFields(s));
  const Graph& g = ix.graph();
  Placement p;
  p.global_batch = batch;
  absl::flat_hash_map<std::string, int> group_of;
  bool any_wg = false;
  for (int gi = 0; gi < s.groups_size(); ++gi) {
    const quilt::v1::GroupPlacement& gp = s.groups(gi);
    for (const std::string& op : gp.ops()) {
      const int i = ix.OpIndex(op);
      if (i < 0 || GroupKey(g.ops[i]) != op) {
        return absl::InvalidArgumentError(absl::StrCat(
            "group ", gi, " names op '", op, "', ",
            i < 0 ? "which is no op of the graph"
                  : "which is not a forward op (gradient ops and updates go with theirs)"));
      }
      if (auto [it, added] = group_of.emplace(op, gi); !added) {
        return absl::InvalidArgumentError(
            it->second == gi
                ? absl::StrCat("group ", gi, " names op '", op, "' twice")
                : absl::StrCat("op '", op, "' is in group ", it->second, " and in group ", gi));
      }
    }
    std::vector<std::pair<int, int>> reps;
    absl::flat_hash_set<int> listed;
    for (const quilt::v1::DeviceReplicas& r : gp.replicas()) {
      const int d = topo.DeviceIndex(r.device());
      if (d < 0)
        return absl::InvalidArgumentError("strategy names unknown device '" + r.device() + "'");
      if (!listed.insert(d).second) {
        return absl::InvalidArgumentError(absl::StrCat("group ", gi, " lists device '", r.device(),
                                                       "' twice (one entry per device: its "
                                                       "replica count)"));
      }
      if (r.replicas() < 0) return absl::InvalidArgumentError("negative replica count");
      if (r.replicas() > 0) reps.push_back({d, r.replicas()});
    }
    if (reps.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("group ", gi, " has no replicas"));
    }
    // A device the split gives no rows (a batch smaller than the replica
    // count) does nothing in the group; the others keep the rows that
    // split gave them (their counts become those rows: split again by
    // the old counts, a kept device could get none).
    if (reps.size() > 1) {
      const std::vector<Slice> rows = SplitBatch(reps, batch);
      if (rows.size() < reps.size()) {
        reps.clear();
        for (const Slice& r : rows) reps.push_back({r.device, static_cast<int>(r.end - r.begin)});
      }
    }
    using Split = std::vector<std::pair<int, int>>;
    ASSIGN_OR_RETURN(Split wg, WeightGradientSplit(gp, gi, reps, topo, batch));
    any_wg |= !wg.empty();
    p.groups.push_back(std::move(reps));
    p.weight_gradient_groups.push_back(std::move(wg));
  }
  const std::vector<bool> wg_ops =
      any_wg ? WeightGradientOps(ix) : std::vector<bool>(g.ops.size(), false);
  for (const Op& op : g.ops) {
    auto it = group_of.find(GroupKey(op));
    if (it == group_of.end()) {
      return absl::InvalidArgumentError("the strategy puts op '" + GroupKey(op) + "' in no group");
    }
    p.group_of_op.push_back(it->second);
  }
  absl::flat_hash_map<std::string, const quilt::v1::ParameterAggregation*> aggs;
  bool any_sparse = false;
  absl::flat_hash_map<std::string, const ParameterSpec*> specs;
  if (s.aggregations_size() > 0) {
    for (const ParameterSpec& spec : g.parameters) specs[spec.tensor] = &spec;
  }
  for (const auto& a : s.aggregations()) {
    auto found = specs.find(a.parameter());
    const ParameterSpec* spec = found == specs.end() ? nullptr : found->second;
    if (spec == nullptr || spec->frozen) {
      return absl::InvalidArgumentError(
          absl::StrCat("the strategy aggregates '", a.parameter(), "', which is ",
                       spec == nullptr ? "no parameter of the graph"
                                       : "a frozen parameter (it has no gradient)"));
    }
    if (!aggs.emplace(a.parameter(), &a).second) {
      return absl::InvalidArgumentError("the strategy aggregates '" + a.parameter() + "' twice");
    }
    any_sparse |= a.method() == quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP;
  }
  // Embedding tables (only looked for when a strategy gathers lookups).
  std::map<std::string, std::vector<int>> tables;
  if (any_sparse) tables = LookupTables(ix);
  // Lookup gradients every device of their table computes for the whole
  // batch: op → the table's placement.
  absl::flat_hash_map<int, const ParamPlacement*> whole_batch;
  // Update ops run where the parameter lives (by parameter tensor id).
  absl::flat_hash_map<int, int> update_op_of;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (ix.Schema(static_cast<int>(i)).is_update) {
      update_op_of[ix.Inputs(static_cast<int>(i))[0]] = static_cast<int>(i);
    }
  }
  for (const ParameterSpec& param : g.parameters) {
    if (param.frozen) continue;
    const int param_tensor = ix.Tensor(param.tensor);
    auto u = update_op_of.find(param_tensor);
    if (u == update_op_of.end()) continue;  // unused parameter
    ParamPlacement pp;
    const auto& reps = p.groups[p.group_of_op[u->second]];
    auto a = aggs.find(param.tensor);
    if (a != aggs.end()) {
      pp.method = a->second->method();
      pp.bucket = a->second->bucket();
      pp.partition_bytes = a->second->partition_bytes();
      if (pp.partition_bytes < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", param.tensor, "' has negative partition_bytes ", pp.partition_bytes));
      }
      if (pp.partition_bytes > 0 && pp.method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
        return absl::InvalidArgumentError(
            "parameter '" + param.tensor +
            "' sets partition_bytes, which only all-reduce methods take (parameter servers "
            "shard by their servers)");
      }
    }
    if (pp.method == quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP) {
      if (!tables.count(param.tensor)) {
        return absl::InvalidArgumentError(
            "parameter '" + param.tensor +
            "' is aggregated by sparse lookup, which only embedding tables take (a parameter "
            "that a Gather along axis 0 looks rows up in by ids that carry the batch); no such "
            "lookup reads it");
      }
      if (pp.partition_bytes > 0) {
        return absl::InvalidArgumentError(
            "parameter '" + param.tensor +
            "' sets partition_bytes, which sparse lookup does not take (its lookups' part is "
            "gathered, not summed)");
      }
    }
    if (pp.method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
      if (a == aggs.end() || a->second->servers().empty()) {
        return absl::InvalidArgumentError("parameter '" + param.tensor + "' has no servers");
      }
      const Shape& shape = g.tensors()[param_tensor].shape;
      const int64_t rows = shape.rank() == 0 ? 1 : shape.dim(0).value;
      const int n =
          std::min<int>(a->second->servers_size(), static_cast<int>(std::max<int64_t>(1, rows)));
      for (int k = 0; k < n; ++k) {
        const int d = topo.DeviceIndex(a->second->servers(k));
        if (d < 0)
          return absl::InvalidArgumentError("unknown server '" + a->second->servers(k) + "'");
        if (std::find(pp.devices.begin(), pp.devices.end(), d) != pp.devices.end()) {
          return absl::InvalidArgumentError("parameter '" + param.tensor + "' lists server '" +
                                            a->second->servers(k) + "' twice");
        }
        pp.devices.push_back(d);
        pp.shards.push_back({rows * k / n, rows * (k + 1) / n});
      }
    } else {
      for (const auto& [d, r] : reps) pp.devices.push_back(d);
    }
    p.params[param.tensor] = std::move(pp);
    if (p.params[param.tensor].method == quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP) {
      for (int op : tables.at(param.tensor)) whole_batch[op] = &p.params[param.tensor];
    }
  }
  // Each group's splits, made once: (rows of its ops, rows of its weight
  // gradients' ops).
  std::vector<std::optional<std::vector<Slice>>> rows_of(p.groups.size()),
      wg_rows_of(p.groups.size());
  auto split = [&](std::vector<std::optional<std::vector<Slice>>>& memo, int gi,
                   const std::vector<std::pair<int, int>>& reps) -> const std::vector<Slice>& {
    if (!memo[gi].has_value()) memo[gi] = SplitBatch(reps, batch);
    return *memo[gi];
  };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    const int gi = p.group_of_op[i];
    const auto& reps = p.groups[gi];
    const bool batched = SplitByRows(ix, static_cast<int>(i));
    std::vector<Slice> slices;
    if (ix.Schema(static_cast<int>(i)).is_update) {
      const ParamPlacement& pp = p.params.at(op.inputs[0]);
      for (size_t k = 0; k < pp.devices.size(); ++k) {
        if (pp.method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
          slices.push_back({pp.devices[k], pp.shards[k].first, pp.shards[k].second});
        } else {
          slices.push_back({pp.devices[k], 0, 0});
        }
      }
    } else if (auto w = whole_batch.find(static_cast<int>(i)); w != whole_batch.end()) {
      for (int d : w->second->devices) slices.push_back({d, 0, batch});
    } else if (batched && wg_ops[i] && !p.weight_gradient_groups[gi].empty()) {
      slices = split(wg_rows_of, gi, p.weight_gradient_groups[gi]);
    } else if (batched) {
      slices = split(rows_of, gi, reps);
    } else {
      for (const auto& [d, r] : reps) slices.push_back({d, 0, 0});
    }
    p.op_slices.push_back(std::move(slices));
  }
  return p;
}

}  // namespace quilt
