#include "src/planner/coarse_graph.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"
#include "src/planner/placement.h"
#include "src/planner/tensor_bundles.h"

namespace quilt {
namespace {

absl::Status NotInferred(InferContext&) {
  return absl::InternalError("coarsened planner ops are built, not inferred");
}

OpSchema PlannerSchema(const std::string& type, bool update) {
  OpSchema s;
  s.type = type;
  s.doc = "A group of ops in the planner's coarsened graph (cost: the members' sum).";
  s.min_inputs = 0;
  s.max_inputs = -1;
  s.min_outputs = 0;
  s.max_outputs = -1;
  s.infer = NotInferred;
  s.cost = [](const CostContext&) { return OpCost{}; };
  s.is_update = update;
  s.planner_only = true;
  return s;
}

QUILT_REGISTER_OP(PlannerSchema("PlannerGroup", false));
QUILT_REGISTER_OP(PlannerSchema("PlannerUpdate", true));

int64_t Bytes(const TensorInfo& t) { return t.shape.NumElements(1) * DTypeSize(t.dtype); }

bool IsUpdate(const Op& op) { return OpRegistry::Global().Find(op.type)->is_update; }

// Splits coarse op `c`'s members (in topological order) where a replicated
// group sums statistics of the batch across its replicas: before the last
// op that reads, whole, a statistic computed inside `c` (a batch norm's
// moments, forward or backward). The sum is a collective on the group's
// critical path and waits behind any collective holding the links (a
// link carries one at a time); cut there, the search's simulation sees
// the wait where a gradient collective outlasts the work of the next
// group's backward op up to its last batch norm. (Cut at the first, the
// wait is that of a whole unsliced gradient collective, longer than the
// fine plans' gradient slices impose: on 16 random clusters the search's
// prediction for inception_v3 was then up to 37 % above the full
// simulation's, and it passed over plans that are fast.) At most
// `max_parts` parts, cut before the last readers; `sum_bytes[j]` gets the
// bytes summed after part j.
std::vector<std::vector<int>> SplitAtSums(const Graph& g, const std::vector<int>& members, int c,
                                          const std::vector<int>& coarse_of,
                                          const std::vector<int>& position,
                                          const std::map<std::string, std::vector<int>>& consumers,
                                          const std::map<std::string, int>& gradients,
                                          int max_parts, std::vector<int64_t>* sum_bytes) {
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end(), [&](int a, int b) { return position[a] < position[b]; });
  // Positions (in `sorted`) of the first reader of each statistic, and
  // the statistic's bytes.
  std::map<int, int64_t> readers;
  std::map<int, int> at;
  for (size_t s = 0; s < sorted.size(); ++s) at[sorted[s]] = static_cast<int>(s);
  for (int i : sorted) {
    const Op& op = g.ops[i];
    bool batched_input = false;
    for (const std::string& t : op.inputs) {
      const TensorInfo* info = t.empty() ? nullptr : g.FindTensor(t);
      batched_input |= info != nullptr && info->shape.HasBatch();
    }
    if (!batched_input) continue;
    const OpSchema& schema = *OpRegistry::Global().Find(op.type);
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      const std::string& t = op.outputs[o];
      const TensorInfo* info = g.FindTensor(t);
      if (info == nullptr || info->shape.HasBatch() || gradients.count(t) ||
          IsLocalOutput(op, schema, static_cast<int>(o))) {
        continue;
      }
      auto cs = consumers.find(t);
      if (cs == consumers.end()) continue;
      int first = -1;
      for (int j : cs->second) {
        if (coarse_of[j] != c) continue;
        bool batched_output = false;
        for (const std::string& out : g.ops[j].outputs) {
          const TensorInfo* oi = g.FindTensor(out);
          batched_output |= oi != nullptr && oi->shape.HasBatch();
        }
        if (batched_output && (first < 0 || at[j] < first)) first = at[j];
      }
      if (first > 0) readers[first] += Bytes(*info);
    }
  }
  std::vector<std::vector<int>> parts;
  sum_bytes->clear();
  // (Uncut, the members keep their order: the op's cost sums them in it.)
  if (readers.empty() || max_parts < 2) return {members};
  std::vector<std::pair<int, int64_t>> points(readers.begin(), readers.end());
  const size_t splits = std::min<size_t>(max_parts - 1, points.size());
  int from = 0;
  for (size_t j = points.size() - splits; j < points.size(); ++j) {
    const auto& [cut, bytes] = points[j];
    parts.emplace_back(sorted.begin() + from, sorted.begin() + cut);
    sum_bytes->push_back(bytes);
    from = cut;
  }
  parts.emplace_back(sorted.begin() + from, sorted.end());
  return parts;
}

}  // namespace

Grouping GroupOps(const Graph& g, const CostModel& cost, int target, int64_t rows) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < g.ops.size(); ++i) index[g.ops[i].name] = static_cast<int>(i);
  // Forward ops in topological order, each with its backward cost and the
  // bytes of the parameters its update group holds.
  absl::StatusOr<std::vector<int>> order = g.TopologicalOrder();
  std::vector<int> forward;
  std::vector<double> seconds(g.ops.size(), 0.0);
  std::vector<int64_t> param_bytes(g.ops.size(), 0);
  std::vector<std::vector<std::string>> params(g.ops.size());
  for (int i : order.ok() ? *order : std::vector<int>{}) {
    const Op& op = g.ops[i];
    auto key = index.find(GroupKey(op));
    if (key == index.end()) continue;
    if (op.forward_op.empty()) forward.push_back(i);
    if (IsUpdate(op)) {
      params[key->second].push_back(op.inputs[0]);
      param_bytes[key->second] += Bytes(*g.FindTensor(op.inputs[0]));
    } else {
      seconds[key->second] += cost.OpTime(i, 0, rows);
    }
  }
  double total = 0;
  int64_t total_params = 0;
  for (int i : forward) {
    total += seconds[i];
    total_params += param_bytes[i];
  }
  target = std::max(1, target);
  const double share = total / target;
  const int64_t big = std::max<int64_t>(1, total_params / target);
  Grouping out;
  out.rows = std::max<int64_t>(1, rows);
  double cur = 0;
  int64_t cur_params = 0;
  for (int i : forward) {
    const bool start = out.forward_ops.empty() || cur >= share ||
                       (param_bytes[i] >= big && cur_params > 0) ||
                       (cur_params >= big && param_bytes[i] > 0);
    if (start) {
      out.forward_ops.emplace_back();
      out.params.emplace_back();
      out.seconds.push_back(0);
      out.param_bytes.push_back(0);
      out.activation_bytes_per_row.push_back(0);
      cur = 0;
      cur_params = 0;
    }
    out.forward_ops.back().push_back(i);
    out.params.back().insert(out.params.back().end(), params[i].begin(), params[i].end());
    out.seconds.back() += seconds[i];
    out.param_bytes.back() += param_bytes[i];
    for (const std::string& t : g.ops[i].outputs) {
      const TensorInfo* info = g.FindTensor(t);
      if (info != nullptr && info->shape.HasBatch()) {
        out.activation_bytes_per_row.back() += info->shape.NumElements(1) * DTypeSize(info->dtype);
      }
    }
    cur += seconds[i];
    cur_params += param_bytes[i];
  }
  return out;
}

std::string CoarseModel::ForwardOp(int k) const { return absl::StrCat("group", k); }

absl::StatusOr<std::unique_ptr<CoarseModel>> CoarseModel::Build(const Graph& g,
                                                                const Grouping& grouping,
                                                                const CostModel& fine_cost,
                                                                bool bundle, int sum_parts) {
  if (!g.has_backward) return absl::InvalidArgumentError("coarsening needs a training graph");
  std::unique_ptr<CoarseModel> m(new CoarseModel());
  m->grouping_ = grouping;
  const int groups = static_cast<int>(grouping.forward_ops.size());
  std::map<std::string, int> index, group_of_forward;
  for (size_t i = 0; i < g.ops.size(); ++i) index[g.ops[i].name] = static_cast<int>(i);
  for (int k = 0; k < groups; ++k) {
    for (int i : grouping.forward_ops[k]) group_of_forward[g.ops[i].name] = k;
  }
  std::map<std::string, int> producer = g.Producers();
  std::map<std::string, std::vector<int>> consumers;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    for (const std::string& t : g.ops[i].inputs) {
      if (!t.empty()) consumers[t].push_back(static_cast<int>(i));
    }
  }
  // Coarse ops: 0..G-1 forward, G..2G-1 backward, then one update per flat
  // parameter. Flat parameters: (group, coarse op producing the gradients).
  std::vector<int> coarse_of(g.ops.size(), -1);
  std::vector<std::vector<int>> members(2 * groups);
  for (int k = 0; k < groups; ++k) {
    for (int i : grouping.forward_ops[k]) coarse_of[i] = k;
  }
  absl::StatusOr<std::vector<int>> order = g.TopologicalOrder();
  if (!order.ok()) return order.status();
  // Backward ops join their forward op's group; a gradient Sum joins the
  // group of the op that consumes it (its forward op is only where autodiff
  // happened to be), which keeps the coarse graph acyclic.
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    const Op& op = g.ops[*it];
    if (op.forward_op.empty() || IsUpdate(op)) continue;
    int k = -1;
    if (op.type == "Sum" && op.outputs.size() == 1) {
      for (int c : consumers[op.outputs[0]]) {
        if (coarse_of[c] >= 0) {
          k = coarse_of[c] >= groups ? coarse_of[c] - groups : coarse_of[c];
          break;
        }
      }
    }
    if (k < 0) {
      auto f = group_of_forward.find(op.forward_op);
      if (f == group_of_forward.end()) {
        return absl::InvalidArgumentError("op '" + op.name + "' belongs to no group");
      }
      k = f->second;
    }
    coarse_of[*it] = groups + k;
  }
  // Flat parameters.
  struct Flat {
    int group;
    int producer;  // coarse op producing the gradients
    std::vector<int> updates;
    int64_t elements = 0, state_elements = 0;
  };
  std::vector<Flat> flats;
  std::map<std::pair<int, int>, int> flat_index;
  std::map<std::string, int> flat_of_param, flat_of_grad, flat_of_state;
  for (int i : *order) {
    const Op& op = g.ops[i];
    if (!IsUpdate(op)) continue;
    auto f = group_of_forward.find(GroupKey(op));
    if (f == group_of_forward.end()) {
      return absl::InvalidArgumentError("update '" + op.name + "' belongs to no group");
    }
    auto p = producer.find(op.inputs[1]);
    const int from = p == producer.end() ? -1 : coarse_of[p->second];
    auto [it, fresh] =
        flat_index.emplace(std::make_pair(f->second, from), static_cast<int>(flats.size()));
    if (fresh) flats.push_back({f->second, from, {}, 0, 0});
    Flat& flat = flats[it->second];
    flat.updates.push_back(i);
    flat.elements += g.FindTensor(op.inputs[0])->shape.NumElements(1);
    flat_of_param[op.inputs[0]] = it->second;
    flat_of_grad[op.inputs[1]] = it->second;
    for (size_t k = 2; k < op.inputs.size(); ++k) {
      flat_of_state[op.inputs[k]] = it->second;
      flat.state_elements += g.FindTensor(op.inputs[k])->shape.NumElements(1);
    }
    coarse_of[i] = 2 * groups + it->second;
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (coarse_of[i] < 0)
      return absl::InvalidArgumentError("op '" + g.ops[i].name + "' belongs to no group");
    if (coarse_of[i] < 2 * groups) members[coarse_of[i]].push_back(static_cast<int>(i));
  }
  for (const Flat& f : flats) members.push_back(f.updates);

  Graph& cg = m->graph_;
  cg.name = g.name;
  cg.has_backward = true;
  cg.inputs = g.inputs;
  cg.labels = g.labels;
  cg.loss = g.loss;
  cg.optimizer = g.optimizer;
  cg.reference_batch = g.reference_batch;
  std::set<std::string> declared;
  auto declare = [&](const std::string& name) -> absl::Status {
    if (!declared.insert(name).second) return absl::OkStatus();
    return cg.AddTensor(*g.FindTensor(name));
  };
  auto flat_name = [&](int f, const char* what) {
    return absl::StrCat("group", flats[f].group, "/", what, f);
  };
  m->flat_params_.assign(groups, {});
  for (size_t f = 0; f < flats.size(); ++f) {
    const int fi = static_cast<int>(f);
    RETURN_IF_ERROR(cg.AddTensor({flat_name(fi, "param"), DType::kF32,
                                  Shape::Fixed({flats[f].elements}), TensorRole::kParameter}));
    RETURN_IF_ERROR(cg.AddTensor({flat_name(fi, "grad"), DType::kF32,
                                  Shape::Fixed({flats[f].elements}), TensorRole::kGradient}));
    if (flats[f].state_elements > 0) {
      // Rows match the parameter's, so a server's shard of the state is
      // the rows of its parameter shard.
      const int64_t n = flats[f].elements;
      const Shape shape = flats[f].state_elements % n == 0
                              ? Shape::Fixed({n, flats[f].state_elements / n})
                              : Shape::Fixed({flats[f].state_elements});
      RETURN_IF_ERROR(
          cg.AddTensor({flat_name(fi, "state"), DType::kF32, shape, TensorRole::kOptimizerState}));
    }
    ParameterSpec spec;
    spec.tensor = flat_name(fi, "param");
    cg.parameters.push_back(spec);
    m->flat_params_[flats[f].group].push_back(spec.tensor);
  }
  auto add_frozen = [&](const std::string& tensor) {
    ParameterSpec frozen;
    frozen.tensor = tensor;
    frozen.frozen = true;
    cg.parameters.push_back(frozen);
  };
  // Tensors crossing between the same coarse ops cross as one bundle.
  std::map<std::string, int> flat = flat_of_param;
  flat.insert(flat_of_grad.begin(), flat_of_grad.end());
  for (const TensorBundle& b :
       bundle ? BundleTensors(g, coarse_of, 2 * groups, producer, consumers, flat)
              : std::vector<TensorBundle>{}) {
    RETURN_IF_ERROR(cg.AddTensor(b.info));
    if (b.frozen_parameter) add_frozen(b.name);
    for (const std::string& t : b.members) m->merged_[t] = b.name;
  }
  for (const ParameterSpec& p : g.parameters) {
    if (!flat_of_param.count(p.tensor) && !m->merged_.count(p.tensor)) add_frozen(p.tensor);
  }
  const int total = static_cast<int>(members.size());
  std::vector<int> position(g.ops.size(), 0);
  for (size_t p = 0; p < order->size(); ++p) position[(*order)[p]] = static_cast<int>(p);
  // Members of each coarse op, in the order the ops are added (its cost).
  std::vector<std::vector<int>> cost_members;
  // Coarse ops with the tensors that cross their boundaries.
  for (int c = 0; c < total; ++c) {
    if (members[c].empty()) continue;
    Op op;
    const bool update = c >= 2 * groups;
    const int k = update ? flats[c - 2 * groups].group : (c < groups ? c : c - groups);
    op.name = c < groups ? absl::StrCat("group", k)
                         : (update ? absl::StrCat("group", k, "/update", c - 2 * groups)
                                   : absl::StrCat("group", k, "/backward"));
    op.type = update ? "PlannerUpdate" : "PlannerGroup";
    if (c >= groups) op.forward_op = absl::StrCat("group", k);
    std::set<std::string> ins, outs;
    std::vector<int64_t> local;
    auto add_input = [&](const std::string& name) {
      if (ins.insert(name).second) op.inputs.push_back(name);
    };
    if (update) {
      const int f = c - 2 * groups;
      add_input(flat_name(f, "param"));
      add_input(flat_name(f, "grad"));
      if (flats[f].state_elements > 0) add_input(flat_name(f, "state"));
    }
    for (int i : members[c]) {
      const Op& fine = g.ops[i];
      if (!update) {
        for (const std::string& t : fine.inputs) {
          if (t.empty()) continue;
          auto p = producer.find(t);
          if (p != producer.end() && coarse_of[p->second] == c) continue;  // internal
          auto fp = flat_of_param.find(t);
          if (fp != flat_of_param.end()) {
            add_input(flat_name(fp->second, "param"));
            continue;
          }
          if (auto mt = m->merged_.find(t); mt != m->merged_.end()) {
            add_input(mt->second);
            continue;
          }
          RETURN_IF_ERROR(declare(t));
          add_input(t);
        }
      }
      for (size_t o = 0; o < fine.outputs.size(); ++o) {
        const std::string& t = fine.outputs[o];
        if (update) continue;  // in-place updates: nothing crosses
        auto fg = flat_of_grad.find(t);
        if (fg != flat_of_grad.end()) {
          const std::string name = flat_name(fg->second, "grad");
          if (outs.insert(name).second) op.outputs.push_back(name);
          continue;
        }
        if (auto mt = m->merged_.find(t); mt != m->merged_.end()) {
          if (outs.insert(mt->second).second) op.outputs.push_back(mt->second);
          continue;
        }
        bool outside = false;
        for (int j : consumers[t]) outside |= coarse_of[j] != c && !flat_of_grad.count(t);
        if (!outside) continue;
        RETURN_IF_ERROR(declare(t));
        if (!outs.insert(t).second) continue;
        if (IsLocalOutput(fine, *OpRegistry::Global().Find(fine.type), static_cast<int>(o))) {
          local.push_back(static_cast<int64_t>(op.outputs.size()));
        }
        op.outputs.push_back(t);
      }
    }
    if (!local.empty()) op.attrs.SetInts("local_outputs", local);
    if (!update) {
      // The largest tensor that lives and dies inside the coarse op (a
      // transposed weight, a temporary of a gradient) stands in for the
      // members' short-lived memory: an output nobody reads, so the
      // simulator holds it exactly while the op runs.
      int64_t fixed = 0, per_row = 0;
      for (int i : members[c]) {
        for (const std::string& t : g.ops[i].outputs) {
          if (outs.count(t) || flat_of_grad.count(t) || m->merged_.count(t)) continue;
          const TensorInfo* info = g.FindTensor(t);
          const int64_t elements = info->shape.NumElements(1) * DTypeSize(info->dtype) / 4;
          if (info->shape.HasBatch()) {
            per_row = std::max(per_row, elements);
          } else {
            fixed = std::max(fixed, elements);
          }
        }
      }
      if (fixed > 0) {
        const std::string name = op.name + "/scratch";
        RETURN_IF_ERROR(
            cg.AddTensor({name, DType::kF32, Shape::Fixed({fixed}), TensorRole::kActivation}));
        op.outputs.push_back(name);
      }
      if (per_row > 0) {
        const std::string name = op.name + "/scratch_rows";
        RETURN_IF_ERROR(cg.AddTensor({name, DType::kF32, Shape({Dim::Batch(), Dim::Fixed(per_row)}),
                                      TensorRole::kActivation}));
        op.outputs.push_back(name);
      }
    }
    std::vector<int64_t> sum_bytes;
    std::vector<std::vector<int>> parts =
        update ? std::vector<std::vector<int>>{members[c]}
               : SplitAtSums(g, members[c], c, coarse_of, position, consumers, flat_of_grad,
                             sum_parts, &sum_bytes);
    // The parts before each sum: ops of the group reading what the op
    // reads, each handing the next its statistics (a partial sum where the
    // group is replicated). The last part is the op itself.
    const std::vector<std::string> op_inputs = op.inputs;
    for (size_t j = 0; j + 1 < parts.size(); ++j) {
      Op part;
      part.name = absl::StrCat(op.name, "/part", j);
      part.type = "PlannerGroup";
      part.forward_op = absl::StrCat("group", k);
      part.inputs = op_inputs;
      if (j > 0) part.inputs.push_back(absl::StrCat(op.name, "/sums", j - 1));
      const std::string sums = absl::StrCat(op.name, "/sums", j);
      RETURN_IF_ERROR(
          cg.AddTensor({sums, DType::kF32, Shape::Fixed({std::max<int64_t>(1, sum_bytes[j] / 4)}),
                        TensorRole::kActivation}));
      part.outputs.push_back(sums);
      cg.ops.push_back(std::move(part));
      cost_members.push_back(parts[j]);
    }
    if (parts.size() > 1) op.inputs.push_back(absl::StrCat(op.name, "/sums", parts.size() - 2));
    cg.ops.push_back(std::move(op));
    cost_members.push_back(parts.back());
  }
  absl::StatusOr<std::vector<int>> coarse_order = cg.TopologicalOrder();
  if (!coarse_order.ok()) return Annotate(coarse_order.status(), "the coarsened graph");
  m->cost_ = std::make_unique<CostModel>(
      CostModel::Composite(&m->graph_, &fine_cost, std::move(cost_members)));
  absl::StatusOr<GraphIndex> graph_index = GraphIndex::Build(m->graph_);
  if (!graph_index.ok()) return Annotate(graph_index.status(), "the coarsened graph");
  m->index_ = std::make_unique<GraphIndex>(*std::move(graph_index));
  return m;
}

}  // namespace quilt
