#include "src/runtime/graph_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"
#include "src/runtime/initializers.h"

namespace quilt {

absl::StatusOr<std::unique_ptr<GraphRunner>> GraphRunner::Create(Graph graph,
                                                                 RunnerOptions options) {
  std::unique_ptr<GraphRunner> r(new GraphRunner(std::move(graph), options));
  RETURN_IF_ERROR(r->Plan());
  return r;
}

absl::Status GraphRunner::Plan() {
  const auto& tensors = graph_.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    ids_[tensors[i].name] = static_cast<int>(i);
    infos_.push_back(&tensors[i]);
  }
  const int n = static_cast<int>(tensors.size());
  persistent_.assign(n, false);
  state_.resize(n);
  consumers_.assign(n, 0);
  for (const ParameterSpec& p : graph_.parameters) {
    const int id = ids_.at(p.tensor);
    persistent_[id] = true;
    absl::StatusOr<Tensor> v = InitialValue(p, tensors[id].shape.Concrete(1));
    if (!v.ok()) return Annotate(v.status(), "initializing parameter " + p.tensor);
    state_[id] = std::move(*v);
  }
  for (const auto& [name, value] : graph_.constants) {
    const int id = ids_.at(name);
    persistent_[id] = true;
    state_[id] = value;
  }
  for (const TensorInfo& t : tensors) {
    if (t.role == TensorRole::kOptimizerState) {
      const int id = ids_.at(t.name);
      persistent_[id] = true;
      ASSIGN_OR_RETURN(state_[id], Tensor::Zeros(t.dtype, t.shape.Concrete(1)));
    }
  }
  ASSIGN_OR_RETURN(std::vector<int> order, graph_.TopologicalOrder());
  std::vector<std::string> missing;
  for (int idx : order) {
    const Op& op = graph_.ops[idx];
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    PlannedOp p{&op,
                KernelRegistry::Global().Find("cpu", op.type),
                {},
                {},
                schema != nullptr && schema->is_update};
    if (p.kernel == nullptr) missing.push_back(absl::StrCat(op.type, " (op '", op.name, "')"));
    for (const std::string& in : op.inputs) {
      const int id = in.empty() ? -1 : ids_.at(in);
      p.inputs.push_back(id);
      if (id >= 0) ++consumers_[id];
    }
    for (const std::string& out : op.outputs) p.outputs.push_back(ids_.at(out));
    ops_.push_back(std::move(p));
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no CPU kernel for: ", absl::StrJoin(missing, ", ")));
  }
  if (!graph_.loss.output.empty()) loss_id_ = ids_.at(graph_.loss.output);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> GraphRunner::BatchOf(const std::map<std::string, Tensor>& feeds) const {
  int64_t batch = -1;
  std::vector<std::string> fed = graph_.inputs;
  fed.insert(fed.end(), graph_.labels.begin(), graph_.labels.end());
  for (const std::string& name : fed) {
    auto it = feeds.find(name);
    if (it == feeds.end()) return absl::InvalidArgumentError("no data fed for '" + name + "'");
    const Shape& s = infos_[ids_.at(name)]->shape;
    const int axis = s.BatchAxis();
    if (axis < 0 || it->second.rank() != s.rank()) continue;
    const int64_t b = it->second.dim(axis) / s.dim(axis).value;
    if (batch < 0) batch = b;
  }
  if (fed.empty()) batch = 1;  // nothing is fed: no batch dimension in play
  if (batch <= 0) return absl::InvalidArgumentError("cannot tell the batch size from the feeds");
  for (const std::string& name : fed) {
    const TensorInfo* t = infos_[ids_.at(name)];
    const Tensor& v = feeds.at(name);
    if (v.dims() != t->shape.Concrete(batch) || v.dtype() != t->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", name, "' was fed ", v.TypeString(), "; at batch ", batch, " it must be ",
          DTypeName(t->dtype), "[", absl::StrJoin(t->shape.Concrete(batch), ","), "]"));
    }
  }
  return batch;
}

absl::Status GraphRunner::Run(const std::map<std::string, Tensor>& feeds, bool train,
                              const std::vector<int>& keep, std::vector<Tensor>* values) {
  ASSIGN_OR_RETURN(const int64_t batch, BatchOf(feeds));
  values->assign(state_.begin(), state_.end());
  for (const auto& [name, t] : feeds) {
    auto it = ids_.find(name);
    if (it != ids_.end()) (*values)[it->second] = t;
  }
  std::vector<int> remaining = consumers_;
  std::vector<bool> kept(values->size(), false);
  for (int id : keep) kept[id] = true;
  for (const PlannedOp& p : ops_) {
    if (p.update && !train) continue;
    std::vector<const Tensor*> in;
    std::vector<const Shape*> in_shapes;
    for (int id : p.inputs) {
      in.push_back(id >= 0 ? &(*values)[id] : nullptr);
      in_shapes.push_back(id >= 0 ? &infos_[id]->shape : nullptr);
    }
    std::vector<std::vector<int64_t>> out_dims;
    std::vector<DType> out_types;
    for (int id : p.outputs) {
      out_dims.push_back(infos_[id]->shape.Concrete(batch));
      out_types.push_back(infos_[id]->dtype);
    }
    std::vector<Tensor> outs(p.outputs.size());
    KernelContext ctx(*p.op, std::move(in), std::move(in_shapes), std::move(out_dims),
                      std::move(out_types), &outs);
    ctx.step = step_;
    ctx.seed = options_.seed;
    ctx.local_batch = batch;
    ctx.global_batch = batch;
    ctx.batch_offset = 0;
    const absl::Time start = options_.profile ? absl::Now() : absl::InfinitePast();
    RETURN_IF_ERROR(p.kernel(ctx));
    if (options_.profile) op_times_[p.op->type] += absl::ToDoubleSeconds(absl::Now() - start);
    for (size_t i = 0; i < p.outputs.size(); ++i) {
      if (!outs[i].valid()) {
        // Outputs a kernel chose not to produce (e.g. optional statistics).
        ASSIGN_OR_RETURN(outs[i], Tensor::Zeros(infos_[p.outputs[i]]->dtype,
                                                infos_[p.outputs[i]]->shape.Concrete(batch)));
      }
      (*values)[p.outputs[i]] = std::move(outs[i]);
    }
    for (int id : p.inputs) {
      if (id >= 0 && --remaining[id] == 0 && !persistent_[id] && !kept[id]) {
        (*values)[id] = Tensor();
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float> GraphRunner::Step(const std::map<std::string, Tensor>& feeds) {
  if (loss_id_ < 0) return absl::FailedPreconditionError("the graph has no loss");
  std::vector<int> keep = {loss_id_};
  for (const StateUpdate& u : graph_.updates) keep.push_back(ids_.at(u.source));
  std::vector<Tensor> values;
  RETURN_IF_ERROR(Run(feeds, /*train=*/true, keep, &values));
  // + 0: a step whose labels are all ignored reports 0, not −0.
  const float loss = values[loss_id_].f32()[0] + 0.0f;
  // All updates read the old state, so apply them only after the step.
  for (const StateUpdate& u : graph_.updates) {
    state_[ids_.at(u.target)] = values[ids_.at(u.source)];
  }
  ++step_;
  return loss;
}

absl::StatusOr<std::map<std::string, Tensor>> GraphRunner::Evaluate(
    const std::map<std::string, Tensor>& feeds, const std::vector<std::string>& fetch) {
  std::vector<int> keep;
  for (const std::string& f : fetch) {
    auto it = ids_.find(f);
    if (it == ids_.end()) return absl::NotFoundError("no tensor '" + f + "'");
    keep.push_back(it->second);
  }
  std::vector<Tensor> values;
  RETURN_IF_ERROR(Run(feeds, /*train=*/false, keep, &values));
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < fetch.size(); ++i) out[fetch[i]] = values[keep[i]];
  return out;
}

const Tensor* GraphRunner::Persistent(const std::string& name) const {
  auto it = ids_.find(name);
  if (it == ids_.end() || !persistent_[it->second]) return nullptr;
  return &state_[it->second];
}

absl::Status GraphRunner::SetPersistent(const std::string& name, Tensor value) {
  auto it = ids_.find(name);
  if (it == ids_.end() || !persistent_[it->second]) {
    return absl::NotFoundError("no persistent tensor '" + name + "'");
  }
  if (value.dims() != state_[it->second].dims() || value.dtype() != state_[it->second].dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name, "' is ", state_[it->second].TypeString(), ", not ", value.TypeString()));
  }
  state_[it->second] = std::move(value);
  return absl::OkStatus();
}

std::vector<std::string> GraphRunner::PersistentNames() const {
  std::vector<std::string> out;
  for (const auto& [name, id] : ids_) {
    if (persistent_[id]) out.push_back(name);
  }
  return out;
}

}  // namespace quilt
