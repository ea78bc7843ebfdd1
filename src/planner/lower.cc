#include "src/planner/lower.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/graph/graph_index.h"
#include "src/graph/op_registry.h"
#include "src/planner/group_nodes.h"
#include "src/planner/lower_writers.h"
#include "src/planner/micro_batches.h"
#include "src/planner/partial_sums.h"
#include "src/planner/placement.h"
#include "src/planner/priorities.h"

namespace quilt {

int64_t RangeBytes(const TensorInfo& t, int64_t begin, int64_t end) {
  const int64_t esize = DTypeSize(t.dtype);
  if (t.shape.HasBatch()) return t.shape.NumElements(end - begin) * esize;
  const int64_t whole = t.shape.NumElements(1) * esize;
  if (begin == 0 && end == 0) return whole;
  const int64_t rows = t.shape.rank() == 0 ? 1 : std::max<int64_t>(1, t.shape.dim(0).value);
  return whole / rows * (end - begin);
}

namespace {

using lower_internal::Key;
using lower_internal::WriterLists;
using quilt::v1::AggregationMethod;
using quilt::v1::Instruction;

// The most members a sum the lowering chooses the method of may use the
// direct all-reduce over (every member messages every other).
constexpr size_t kDirectAllReduceMembers = 16;

class Lowerer {
 public:
  Lowerer(const GraphIndex& ix, const Topology& topo, const Placement& p,
          google::protobuf::Arena* arena)
      : g_(ix.graph()),
        ix_(ix),
        topo_(topo),
        p_(p),
        arena_(arena),
        writers_(static_cast<int>(ix.graph().tensors().size()), topo.num_devices()),
        produced_(ix.graph().tensors().size()),
        full_on_(ix.graph().tensors().size()),
        partial_on_(ix.graph().tensors().size()),
        local_(ix.graph().tensors().size(), false),
        grad_of_param_(ix.graph().tensors().size(), nullptr),
        param_of_(ix.graph().tensors().size(), nullptr) {
    for (const auto& [name, pp] : p.params) {
      if (const int t = ix.Tensor(name); t >= 0) param_of_[t] = &pp;
    }
  }

  ~Lowerer() {
    if (arena_ == nullptr) {
      for (auto& [d, ins] : instrs_) delete ins;
    }
  }
  // Fills `prog` (on the arena, when there is one); `include_graph` copies
  // the training graph into it.
  absl::Status Run(const quilt::v1::Strategy& s, const CostModel* cost, bool include_graph,
                   quilt::v1::DistributedProgram* prog);

 private:
  const TensorInfo& info(int t) const { return g_.tensors()[t]; }
  bool batched(int t) const { return ix_.Batched(t); }
  int64_t Bytes(int t, int64_t b, int64_t e) const { return RangeBytes(info(t), b, e); }
  void SetRange(quilt::v1::TensorRange* r, int t, int64_t b, int64_t e) const {
    r->set_tensor(info(t).name);
    r->set_tensor_index(t);
    r->set_begin(b);
    r->set_end(e);
  }

  // Instructions live on the arena when there is one, else on the heap
  // until the program takes them.
  Instruction* New() {
    return arena_ != nullptr ? google::protobuf::Arena::CreateMessage<Instruction>(arena_)
                             : new Instruction;
  }
  // `hint`: the op's index of a computation, the peer's (or server's)
  // device index of a transfer (HeftPriorities); else -1.
  int64_t Emit(int device, Instruction* ins, absl::Span<const int64_t> deps, int hint = -1) {
    const int64_t id = static_cast<int64_t>(instrs_.size());
    ins->set_id(id);
    sorted_deps_.assign(deps.begin(), deps.end());
    std::sort(sorted_deps_.begin(), sorted_deps_.end());
    sorted_deps_.erase(std::unique(sorted_deps_.begin(), sorted_deps_.end()), sorted_deps_.end());
    ins->mutable_deps()->Reserve(static_cast<int>(sorted_deps_.size()));
    for (int64_t d : sorted_deps_) ins->add_deps(d);
    instrs_.push_back({device, ins});
    hints_.push_back(hint);
    return id;
  }

  void AddWriter(const Key& k, int64_t id) { writers_[k].push_back(id); }
  void MarkPersistent(const Key& k) {
    if (writers_.Mark(k, WriterLists::kPersistent)) persistent_.push_back(k);
  }

  // Writers of the instance `need` on its device (null: none), creating the
  // transfers or aggregation it takes. With `allow_partial`, a partial sum
  // held on the device is returned as is (and *partial set). The list stays
  // valid while others are added.
  using Writers = const lower_internal::WriterList*;
  absl::StatusOr<Writers> Provide(const Key& need, bool allow_partial, bool* partial);
  // Sums partial `t` over its devices; with `partition_bytes` > 0, in
  // slices of rows of dim 0 of at most that many bytes, one collective each.
  void Aggregate(int t, AggregationMethod method, int64_t partition_bytes);
  Writers PushToServer(int t, const Key& need);
  int64_t Transfer(int t, const Key& from, int64_t b, int64_t e, const Key& into);
  absl::Status LowerOp(int op_index);
  // Per input of op i: whether a partial sum of it may be read as is (and
  // make the op's output a partial sum too): only one held by exactly the
  // devices the op runs on (the parts then add up to the output's parts),
  // as the op's PartialRule allows, when its outputs do not carry the
  // batch. Other partial inputs are summed first.
  std::vector<bool> KeepPartial(int op_index) const;
  // Merges the all-reduces of gradients that share a fusion bucket (same
  // devices and algorithm) into one, then restores a topological issue order.
  void FuseBuckets();
  void Reorder();
  // Marks the devices whose loss is a copy of a whole loss another device
  // reports (DeviceProgram.loss_copy).
  void MarkLossCopies(const std::vector<quilt::v1::DeviceProgram*>& per_device) const;

  const Graph& g_;
  const GraphIndex& ix_;
  const Topology& topo_;
  const Placement& p_;
  google::protobuf::Arena* arena_;
  const CostModel* cost_ = nullptr;  // set by Run; may be null
  std::vector<std::pair<int, Instruction*>> instrs_;
  std::vector<int> hints_;  // by instruction, Emit's
  // Scratch: Emit's dependencies, LowerOp's and Aggregate's (which
  // LowerOp's calls to Provide may run).
  std::vector<int64_t> sorted_deps_, deps_, aggregate_deps_;
  WriterLists writers_;
  // Instances marked persistent, fed (also marked in writers_).
  std::vector<Key> persistent_;
  std::vector<Key> feeds_;
  // By tensor. Batch tensors: the instances their producer made.
  std::vector<std::vector<Key>> produced_;
  // Whole (non-batch) tensors: devices holding the full value.
  std::vector<std::vector<int>> full_on_;
  // Partial sums: devices holding a partial (none: not a partial sum).
  std::vector<std::vector<int>> partial_on_;
  // Instructions that read a partial sum as is, by instance.
  absl::flat_hash_map<Key, std::vector<int64_t>> partial_readers_;
  std::vector<bool> local_;  // per-replica statistics, by tensor
  // By gradient tensor: the parameter it updates (for the aggregation
  // choice); null for other tensors.
  std::vector<const std::string*> grad_of_param_;
  // By parameter tensor: its placement (null: none, frozen).
  std::vector<const ParamPlacement*> param_of_;
  // Collective groups (device indices in ring order); id = position + 1.
  std::vector<std::vector<int>> groups_;
  std::map<std::vector<int>, int64_t> group_ids_;
  int64_t next_tag_ = 1;
  int64_t next_collective_ = 1;
};

int64_t Lowerer::Transfer(int t, const Key& from, int64_t b, int64_t e, const Key& into) {
  const int64_t tag = next_tag_++;
  const int64_t bytes = Bytes(t, b, e);
  Instruction& send = *New();
  SetRange(send.mutable_send()->mutable_range(), t, b, e);
  send.mutable_send()->set_peer_device(topo_.device(into.device).id);
  send.mutable_send()->set_tag(tag);
  send.mutable_send()->set_bytes(bytes);
  Emit(from.device, &send, writers_[from], into.device);
  Instruction& recv = *New();
  SetRange(recv.mutable_recv()->mutable_range(), t, b, e);
  recv.mutable_recv()->set_peer_device(topo_.device(from.device).id);
  recv.mutable_recv()->set_tag(tag);
  recv.mutable_recv()->set_bytes(bytes);
  SetRange(recv.mutable_recv()->mutable_into(), t, into.begin, into.end);
  const int64_t id = Emit(into.device, &recv, {});
  AddWriter(into, id);
  return id;
}

void Lowerer::Aggregate(int t, AggregationMethod method, int64_t partition_bytes) {
  std::vector<int> devices = partial_on_[t];
  SortByNode(topo_, &devices);
  auto [git, fresh] = group_ids_.emplace(devices, static_cast<int64_t>(groups_.size()) + 1);
  if (fresh) groups_.push_back(devices);
  if (method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
    method = quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE;
  }
  // Slices: whole rows of dim 0, at most partition_bytes (or one row)
  // each, as even as the rows allow.
  const int64_t whole = Bytes(t, 0, 0);
  const int64_t rows = info(t).shape.rank() == 0 ? 1 : info(t).shape.dim(0).value;
  int64_t slices = 1;
  if (partition_bytes > 0 && whole > partition_bytes && rows > 1) {
    const int64_t per_slice = std::max<int64_t>(1, partition_bytes / (whole / rows));
    slices = (rows + per_slice - 1) / per_slice;
  }
  if (method == quilt::v1::AGGREGATION_METHOD_UNSPECIFIED ||
      method == quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP) {
    // The fastest all-reduce for these bytes and members (small sums over
    // a few members: the direct one; latency-bound sums over many members:
    // the tree; large ones over nodes of several members: the two-level
    // one).
    method = quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE;
    // (Priced as the simulator prices each slice's collective.)
    const double bytes = static_cast<double>(whole) / static_cast<double>(slices);
    double best = cost_ != nullptr ? cost_->AllReduce(method, devices, bytes).time_s : 0;
    for (AggregationMethod m : {quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
                                quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE,
                                quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE}) {
      if (cost_ == nullptr) break;
      if (m == quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE &&
          devices.size() > kDirectAllReduceMembers) {
        continue;
      }
      const double time = cost_->AllReduce(m, devices, bytes).time_s;
      if (time < best) {
        best = time;
        method = m;
      }
    }
  }
  std::vector<lower_internal::WriterList> written(devices.size());  // by place in `devices`
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t begin = slices == 1 ? 0 : rows * s / slices;
    const int64_t end = slices == 1 ? 0 : rows * (s + 1) / slices;
    const int64_t collective = next_collective_++;
    for (size_t di = 0; di < devices.size(); ++di) {
      const int d = devices[di];
      const Key k{t, d, 0, 0};
      Instruction& ins = *New();
      auto* ar = ins.mutable_all_reduce();
      ar->set_collective_id(collective);
      ar->set_group(git->second);
      ar->add_tensors(info(t).name);
      ar->set_bytes(slices == 1 ? whole : whole / rows * (end - begin));
      ar->set_begin(begin);
      ar->set_end(end);
      ar->set_algorithm(method);
      // After the ops that read the partial sum as is: the sum replaces it.
      const lower_internal::WriterList& own = writers_[k];
      aggregate_deps_.assign(own.begin(), own.end());
      auto readers = partial_readers_.find(k);
      if (readers != partial_readers_.end()) {
        aggregate_deps_.insert(aggregate_deps_.end(), readers->second.begin(),
                               readers->second.end());
      }
      written[di].push_back(Emit(d, &ins, aggregate_deps_));
    }
  }
  for (size_t di = 0; di < devices.size(); ++di) {
    writers_[Key{t, devices[di], 0, 0}] = std::move(written[di]);
  }
  partial_on_[t].clear();
  full_on_[t] = devices;
}

Lowerer::Writers Lowerer::PushToServer(int t, const Key& need) {
  const std::vector<int>& workers = partial_on_[t];
  Instruction& acc = *New();
  auto* a = acc.mutable_ps_accumulate();
  SetRange(a->mutable_gradient(), t, need.begin, need.end);
  std::vector<int64_t> deps;
  for (int w : workers) {
    if (w == need.device) {
      a->set_includes_local(true);
      const auto& lw = writers_[Key{t, w, 0, 0}];
      deps.insert(deps.end(), lw.begin(), lw.end());
      continue;
    }
    const int64_t tag = next_tag_++;
    Instruction& push = *New();
    auto* ps = push.mutable_ps_push();
    SetRange(ps->mutable_gradient(), t, need.begin, need.end);
    ps->set_server_device(topo_.device(need.device).id);
    ps->set_tag(tag);
    ps->set_bytes(Bytes(t, need.begin, need.end));
    Emit(w, &push, writers_[Key{t, w, 0, 0}], need.device);
    a->add_push_tags(tag);
  }
  const int64_t id = Emit(need.device, &acc, deps);
  AddWriter(need, id);
  return &writers_[need];
}

absl::StatusOr<Lowerer::Writers> Lowerer::Provide(const Key& need, bool allow_partial,
                                                  bool* partial) {
  const int t = need.tensor;
  *partial = false;
  if (writers_.Marked(need, WriterLists::kPersistent) || writers_.Marked(need, WriterLists::kFed))
    return nullptr;
  if (info(t).role == TensorRole::kInput || info(t).role == TensorRole::kLabel) {
    // Every device reads its own rows of the data.
    if (writers_.Mark(need, WriterLists::kFed)) feeds_.push_back(need);
    return nullptr;
  }
  if (const std::vector<int>& holders = partial_on_[t]; !holders.empty()) {
    const bool here = std::find(holders.begin(), holders.end(), need.device) != holders.end();
    if (allow_partial && here && need.begin == 0 && need.end == 0) {
      *partial = true;
      return &writers_[need];
    }
    // A parameter-server update asks for its shard of the summed gradient.
    if (const std::string* param = grad_of_param_[t]; param != nullptr) {
      const ParamPlacement& pp = p_.params.at(*param);
      if (pp.method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
        if (const auto* w = writers_.Find(need)) return w;
        return PushToServer(t, need);
      }
      Aggregate(t, pp.method, pp.partition_bytes);
    } else {
      // Not a gradient (e.g. batch-norm statistics): the runtime's choice,
      // as collective libraries make it.
      Aggregate(t, quilt::v1::AGGREGATION_METHOD_UNSPECIFIED, 0);
    }
  }
  if (const auto* w = writers_.Find(need)) return w;
  const TensorInfo& ti = info(t);
  if (local_[t]) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", ti.name,
                     "' is a statistic of one replica's batch slice and is needed on another "
                     "device (",
                     topo_.device(need.device).id, ")"));
  }
  if (batched(t)) {
    const std::vector<Key>& made = produced_[t];
    if (made.empty()) {
      return absl::InvalidArgumentError("no device computes batch tensor '" + ti.name + "'");
    }
    if (ti.interleaved_batch) {
      // Samples [b, e) of such a tensor are not one range of its rows.
      for (const Key& src : made) {
        if (std::max(src.begin, need.begin) >= std::min(src.end, need.end)) continue;
        if (src.begin != need.begin || src.end != need.end) {
          return absl::InvalidArgumentError(
              absl::StrCat("'", ti.name,
                           "' interleaves its samples along the batch dim (a reshape merged "
                           "the batch with an outer dim), so samples ",
                           need.begin, "..", need.end, " on ", topo_.device(need.device).id,
                           " cannot be taken from samples ", src.begin, "..", src.end, " on ",
                           topo_.device(src.device).id));
        }
      }
    }
    std::vector<int64_t> local_parts;
    Instruction& concat = *New();
    for (const Key& src : made) {
      const int64_t b = std::max(src.begin, need.begin), e = std::min(src.end, need.end);
      if (b >= e) continue;
      if (src.device == need.device) {
        SetRange(concat.mutable_concat()->add_parts(), t, b, e);
        const auto& sw = writers_[src];
        local_parts.insert(local_parts.end(), sw.begin(), sw.end());
      } else {
        Transfer(t, src, b, e, need);
      }
    }
    if (concat.concat().parts_size() > 0) {
      SetRange(concat.mutable_concat()->mutable_target(), t, need.begin, need.end);
      AddWriter(need, Emit(need.device, &concat, local_parts));
    }
    return &writers_[need];
  }
  // A whole tensor: a parameter from its servers, or a copy from a holder.
  if (ti.role == TensorRole::kParameter && param_of_[t] != nullptr &&
      param_of_[t]->method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER && need.begin == 0 &&
      need.end == 0) {
    const ParamPlacement& pp = *param_of_[t];
    for (size_t k = 0; k < pp.devices.size(); ++k) {
      const int64_t tag = next_tag_++;
      Instruction& pull = *New();
      auto* pl = pull.mutable_ps_pull();
      SetRange(pl->mutable_parameter(), t, pp.shards[k].first, pp.shards[k].second);
      pl->set_server_device(topo_.device(pp.devices[k]).id);
      pl->set_tag(tag);
      pl->set_bytes(Bytes(t, pp.shards[k].first, pp.shards[k].second));
      AddWriter(need, Emit(need.device, &pull, {}, pp.devices[k]));
    }
    return &writers_[need];
  }
  const std::vector<int>& holders = full_on_[t];
  if (holders.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", ti.name, "' is needed on ",
                                                   topo_.device(need.device).id,
                                                   " but no device holds it"));
  }
  int src = holders.front();
  for (int h : holders) {
    if (topo_.device(h).node == topo_.device(need.device).node) {
      src = h;
      break;
    }
  }
  // Rows of dim 0 when the destination holds a shard (a parameter server).
  Transfer(t, Key{t, src, 0, 0}, need.begin, need.end, need);
  // A shard is not the whole tensor: only a whole copy serves others.
  if (need.begin == 0 && need.end == 0) full_on_[t].push_back(need.device);
  return &writers_[need];
}

std::vector<bool> Lowerer::KeepPartial(int i) const {
  const std::vector<int>& inputs = ix_.Inputs(i);
  std::vector<bool> keep(inputs.size(), false);
  const PartialRule rule = PartialRuleOf(g_.ops[i], ix_.Schema(i));
  if (rule == PartialRule::kNone) return keep;
  for (int t : ix_.Outputs(i)) {
    if (batched(t)) return keep;  // rows of a batch tensor are not sums
  }
  std::vector<int> devices;
  for (const Slice& s : p_.op_slices[i]) devices.push_back(s.device);
  std::sort(devices.begin(), devices.end());
  bool all = true, any = false;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k] < 0) continue;
    if (!partial_on_[inputs[k]].empty()) {
      std::vector<int> holders = partial_on_[inputs[k]];
      std::sort(holders.begin(), holders.end());
      keep[k] = holders == devices;
    }
    // One partial operand (a product of two partial sums is not a partial
    // sum of the product); a quotient's numerator only.
    if ((rule == PartialRule::kOneOperand && any) ||
        (rule == PartialRule::kFirstOperand && k > 0)) {
      keep[k] = false;
    }
    any |= keep[k];
    all &= keep[k];
  }
  if (rule == PartialRule::kAllOperands && !all) keep.assign(keep.size(), false);
  return keep;
}

absl::Status Lowerer::LowerOp(int i) {
  const Op& op = g_.ops[i];
  const OpSchema* schema = &ix_.Schema(i);
  const std::vector<int>& inputs = ix_.Inputs(i);
  const std::vector<int>& outputs = ix_.Outputs(i);
  const std::vector<Slice>& slices = p_.op_slices[i];
  const bool ps_update = schema->is_update && p_.params.at(op.inputs[0]).method ==
                                                  quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER;
  bool any_batched_input = false;
  for (int in : inputs) any_batched_input |= in >= 0 && batched(in);
  const std::vector<bool> keep = KeepPartial(i);
  std::vector<Key> partial_reads;
  for (const Slice& s : slices) {
    deps_.clear();
    partial_reads.clear();
    bool partial_in = false;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const int t = inputs[k];
      if (t < 0) continue;
      Key need{t, s.device, 0, 0};
      if (batched(t)) {
        need.begin = s.begin;
        need.end = s.end;
      } else if (ps_update) {
        need.begin = s.begin;
        need.end = s.end;
      }
      const TensorRole role = info(t).role;
      if (role == TensorRole::kConstant ||
          (role == TensorRole::kParameter && param_of_[t] == nullptr && !ps_update) ||
          (role == TensorRole::kOptimizerState)) {
        MarkPersistent(need);
      }
      bool partial = false;
      ASSIGN_OR_RETURN(Writers w, Provide(need, keep[k], &partial));
      partial_in |= partial;
      if (partial) partial_reads.push_back(need);
      if (w != nullptr) deps_.insert(deps_.end(), w->begin(), w->end());
    }
    Instruction& ins = *New();
    ins.mutable_compute()->set_op(op.name);
    ins.mutable_compute()->set_op_index(i);
    ins.mutable_compute()->set_begin(s.begin);
    ins.mutable_compute()->set_end(s.end);
    const int64_t id = Emit(s.device, &ins, deps_, i);
    for (const Key& k : partial_reads) partial_readers_[k].push_back(id);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const int t = outputs[k];
      Key out{t, s.device, 0, 0};
      if (batched(t) || ps_update) {
        out.begin = s.begin;
        out.end = s.end;
      }
      AddWriter(out, id);
      if (batched(t)) {
        produced_[t].push_back(out);
        continue;
      }
      if (IsLocalOutput(op, *schema, static_cast<int>(k))) {
        local_[t] = true;
        continue;
      }
      const bool covers_batch = s.begin == 0 && s.end == p_.global_batch;
      const bool partial = (any_batched_input && !covers_batch) || partial_in;
      if (partial) {
        partial_on_[t].push_back(s.device);
      } else {
        full_on_[t].push_back(s.device);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Lowerer::Run(const quilt::v1::Strategy& s, const CostModel* cost, bool include_graph,
                          quilt::v1::DistributedProgram* out) {
  cost_ = cost;
  // Parameters, their optimizer state: persistent where they live.
  for (const auto& [name, pp] : p_.params) {
    const int t = ix_.Tensor(name);
    for (size_t k = 0; k < pp.devices.size(); ++k) {
      const bool ps = pp.method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER;
      const Key key{t, pp.devices[k], ps ? pp.shards[k].first : 0, ps ? pp.shards[k].second : 0};
      MarkPersistent(key);
      if (!ps) full_on_[t].push_back(pp.devices[k]);
    }
  }
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    if (ix_.Schema(static_cast<int>(i)).is_update) {
      grad_of_param_[ix_.Inputs(static_cast<int>(i))[1]] = &g_.ops[i].inputs[0];
    }
  }
  for (int i : ix_.TopologicalOrder()) {
    absl::Status st = LowerOp(i);
    if (!st.ok()) return Annotate(st, "lowering op '" + g_.ops[i].name + "'");
  }
  FuseBuckets();
  Reorder();
  quilt::v1::DistributedProgram& prog = *out;
  if (include_graph) *prog.mutable_graph() = g_.ToProto();
  prog.set_global_batch(p_.global_batch);
  *prog.mutable_strategy() = s;
  prog.mutable_strategy()->set_global_batch(p_.global_batch);  // (the batch it was lowered at)
  for (size_t k = 0; k < groups_.size(); ++k) {
    auto* group = prog.add_groups();
    group->set_id(static_cast<int64_t>(k) + 1);
    for (int d : groups_[k]) group->add_devices(topo_.device(d).id);
    for (double b : ExchangeBytesPerS(topo_, groups_[k])) group->add_node_bytes_per_s(b);
  }
  std::vector<double> priority =
      HeftPriorities(instrs_, groups_, topo_, ix_, cost, s.order(), &hints_);
  std::vector<quilt::v1::DeviceProgram*> per_device(topo_.num_devices(), nullptr);
  std::vector<bool> used(topo_.num_devices(), false);
  for (const auto& [d, ins] : instrs_) used[d] = true;
  // Listed in the order the lowering first needed them (the same for the
  // same strategy; sorting them cost about 2 % of the planner's search).
  const std::vector<Key>& persistent = persistent_;
  const std::vector<Key>& feeds = feeds_;
  for (const auto& k : persistent) used[k.device] = true;
  for (const auto& k : feeds) used[k.device] = true;
  for (int d = 0; d < topo_.num_devices(); ++d) {
    if (!used[d]) continue;
    per_device[d] = prog.add_devices();
    per_device[d]->set_device(topo_.device(d).id);
  }
  for (size_t i = 0; i < instrs_.size(); ++i) {
    if (instrs_[i].second->kind_case() == Instruction::KIND_NOT_SET) continue;  // fused away
    Instruction* ins = instrs_[i].second;
    ins->set_priority(priority[i]);
    per_device[instrs_[i].first]->mutable_instructions()->AddAllocated(ins);
    instrs_[i].second = nullptr;  // the program owns it
  }
  for (const Key& k : persistent) {
    SetRange(per_device[k.device]->add_persistent(), k.tensor, k.begin, k.end);
  }
  for (const Key& k : feeds) {
    SetRange(per_device[k.device]->add_feeds(), k.tensor, k.begin, k.end);
  }
  MarkLossCopies(per_device);
  return absl::OkStatus();
}

void Lowerer::MarkLossCopies(const std::vector<quilt::v1::DeviceProgram*>& per_device) const {
  if (g_.loss.output.empty()) return;
  const int t = ix_.Tensor(g_.loss.output);
  if (t < 0) return;
  // Partial losses all count; a whole loss counts once, on the first
  // device that holds it.
  std::vector<int> counted;
  if (!partial_on_[t].empty()) {
    counted = partial_on_[t];
  } else if (!full_on_[t].empty()) {
    counted = {full_on_[t][0]};
  }
  std::vector<int> holders = partial_on_[t];
  holders.insert(holders.end(), full_on_[t].begin(), full_on_[t].end());
  for (int d : holders) {
    if (per_device[d] == nullptr) continue;
    if (std::find(counted.begin(), counted.end(), d) == counted.end()) {
      per_device[d]->set_loss_copy(true);
    }
  }
}

void Lowerer::FuseBuckets() {
  // collective id → member instruction indices; fusion key → collectives.
  std::map<int64_t, std::vector<size_t>> members;
  std::map<std::tuple<int, int64_t, int>, std::vector<int64_t>> groups;
  for (size_t i = 0; i < instrs_.size(); ++i) {
    const Instruction& ins = *instrs_[i].second;
    if (!ins.has_all_reduce()) continue;
    members[ins.all_reduce().collective_id()].push_back(i);
  }
  for (const auto& [cid, idx] : members) {
    const auto& ar = instrs_[idx[0]].second->all_reduce();
    if (ar.tensors_size() != 1 || ar.end() != 0) continue;  // fused or a slice
    const int t = ix_.Tensor(ar.tensors(0));
    if (t < 0 || grad_of_param_[t] == nullptr) continue;
    const int bucket = p_.params.at(*grad_of_param_[t]).bucket;
    if (bucket <= 0) continue;
    groups[{bucket, ar.group(), ar.algorithm()}].push_back(cid);
  }
  std::vector<int64_t> remap(instrs_.size());
  for (size_t i = 0; i < remap.size(); ++i) remap[i] = static_cast<int64_t>(i);
  bool changed = false;
  for (const auto& [key, cids] : groups) {
    if (cids.size() < 2) continue;
    changed = true;
    const std::vector<size_t>& keep = members[cids.back()];
    for (size_t c = 0; c + 1 < cids.size(); ++c) {
      for (size_t m : members[cids[c]]) {
        // The member on the same device in the kept collective.
        size_t target = keep[0];
        for (size_t k : keep) {
          if (instrs_[k].first == instrs_[m].first) target = k;
        }
        auto* kar = instrs_[target].second->mutable_all_reduce();
        const auto& mar = instrs_[m].second->all_reduce();
        for (const auto& t : mar.tensors()) kar->add_tensors(t);
        kar->set_bytes(kar->bytes() + mar.bytes());
        for (int64_t d : instrs_[m].second->deps()) instrs_[target].second->add_deps(d);
        remap[m] = static_cast<int64_t>(target);
        instrs_[m].second->Clear();
      }
    }
  }
  if (!changed) return;
  for (auto& [d, ins] : instrs_) {
    std::set<int64_t> deps;
    for (int64_t x : ins->deps()) deps.insert(remap[x]);
    deps.erase(ins->id());
    ins->clear_deps();
    for (int64_t x : deps) ins->add_deps(x);
  }
  for (lower_internal::WriterList& ws : writers_.lists()) {
    for (int64_t& w : ws) w = remap[w];
  }
}

void Lowerer::Reorder() {
  // Kahn's algorithm, smallest original id first: keeps creation order where
  // it is already topological, moves fused collectives' consumers after them.
  const size_t n = instrs_.size();
  // Where every instruction depends only on earlier ones (no fused
  // collective moved), that order is already the one Kahn's gives.
  bool topological = true;
  for (size_t i = 0; i < n && topological; ++i) {
    for (int64_t d : instrs_[i].second->deps()) topological &= static_cast<size_t>(d) < i;
  }
  if (topological) return;
  std::vector<int> pending(n, 0);
  std::vector<std::vector<size_t>> succ(n);
  for (size_t i = 0; i < n; ++i) {
    for (int64_t d : instrs_[i].second->deps()) {
      ++pending[i];
      succ[d].push_back(i);
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t s : succ[i]) {
      if (--pending[s] == 0) ready.push(s);
    }
  }
  bool same = true;
  for (size_t k = 0; k < order.size(); ++k) same &= order[k] == k;
  if (same) return;
  // Renumber so that ids increase along the new order.
  std::vector<int64_t> new_id(n);
  for (size_t k = 0; k < order.size(); ++k) new_id[order[k]] = static_cast<int64_t>(k);
  std::vector<std::pair<int, Instruction*>> sorted;
  std::vector<int> hints;
  sorted.reserve(n);
  hints.reserve(n);
  for (size_t k : order) {
    hints.push_back(hints_[k]);
    auto entry = std::move(instrs_[k]);
    std::vector<int64_t> deps(entry.second->deps().begin(), entry.second->deps().end());
    entry.second->clear_deps();
    for (int64_t& d : deps) d = new_id[d];
    std::sort(deps.begin(), deps.end());
    for (int64_t d : deps) entry.second->add_deps(d);
    entry.second->set_id(new_id[k]);
    sorted.push_back(std::move(entry));
  }
  instrs_ = std::move(sorted);
  hints_ = std::move(hints);
}

// Lowers `s` into `prog` (on `arena`, or the heap where null): placed at
// a micro-batch's rows, then repeated per micro-batch (the smaller
// micro-batches, where their count does not divide the batch, lowered at
// one row less).
absl::Status LowerInto(const GraphIndex& ix, const quilt::v1::Strategy& s, const Topology& topo,
                       const CostModel* cost, int64_t global_batch, bool include_graph,
                       google::protobuf::Arena* arena, quilt::v1::DistributedProgram* prog) {
  if (!ix.graph().has_backward) {
    return absl::InvalidArgumentError("lowering needs a training graph");
  }
  ASSIGN_OR_RETURN(const int64_t rows, MicroBatchRows(global_batch, s.micro_batches()));
  ASSIGN_OR_RETURN(Placement p, Place(ix, s, topo, rows));
  RETURN_IF_ERROR(Lowerer(ix, topo, p, arena).Run(s, cost, include_graph, prog));
  std::optional<quilt::v1::DistributedProgram> smaller;
  if (s.micro_batches() > 1 && global_batch % s.micro_batches() != 0) {
    absl::StatusOr<Placement> q = PlaceSmallerMicroBatches(ix, s, topo, p);
    if (!q.ok()) {
      return Annotate(q.status(),
                      "the smaller of " + DescribeMicroBatches(global_batch, s.micro_batches()));
    }
    smaller.emplace();
    RETURN_IF_ERROR(
        Lowerer(ix, topo, *q, nullptr).Run(s, cost, /*include_graph=*/false, &*smaller));
  }
  RETURN_IF_ERROR(UnrollMicroBatches(ix, global_batch, s.micro_batches(), prog,
                                     smaller.has_value() ? &*smaller : nullptr));
  ChargeWork(kLowerWorkPerInstruction * InstructionCount(*prog));  // (work_clock.h)
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<quilt::v1::DistributedProgram> Lower(const Graph& g, const quilt::v1::Strategy& s,
                                                    const Topology& topo, const CostModel* cost,
                                                    int64_t global_batch) {
  if (!g.has_backward) return absl::InvalidArgumentError("lowering needs a training graph");
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  return Lower(ix, s, topo, cost, global_batch);
}

absl::StatusOr<quilt::v1::DistributedProgram> Lower(const GraphIndex& ix,
                                                    const quilt::v1::Strategy& s,
                                                    const Topology& topo, const CostModel* cost,
                                                    int64_t global_batch) {
  quilt::v1::DistributedProgram prog;
  RETURN_IF_ERROR(
      LowerInto(ix, s, topo, cost, global_batch, /*include_graph=*/true, nullptr, &prog));
  return prog;
}

absl::StatusOr<quilt::v1::DistributedProgram> LowerWithoutGraph(const GraphIndex& ix,
                                                                const quilt::v1::Strategy& s,
                                                                const Topology& topo,
                                                                const CostModel* cost,
                                                                int64_t global_batch) {
  quilt::v1::DistributedProgram prog;
  RETURN_IF_ERROR(
      LowerInto(ix, s, topo, cost, global_batch, /*include_graph=*/false, nullptr, &prog));
  return prog;
}

absl::StatusOr<quilt::v1::DistributedProgram*> LowerOnArena(
    const GraphIndex& ix, const quilt::v1::Strategy& s, const Topology& topo, const CostModel* cost,
    int64_t global_batch, google::protobuf::Arena* arena) {
  auto* prog = google::protobuf::Arena::CreateMessage<quilt::v1::DistributedProgram>(arena);
  RETURN_IF_ERROR(LowerInto(ix, s, topo, cost, global_batch, /*include_graph=*/false, arena, prog));
  return prog;
}

}  // namespace quilt
