// The executor's instructions: computations on the device's thread,
// transfers, collectives and parameter-server messages on the transport.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/runtime/comm/collectives.h"
#include "src/runtime/comm/tags.h"
#include "src/runtime/executor_impl.h"
#include "src/runtime/rows.h"

namespace quilt {
namespace {

bool Whole(int64_t b, int64_t e) { return b == 0 && e == 0; }

// The bytes an all-reduce member holds beside the store's instances while
// the sum runs, as the simulator counts them: its staging buffer of
// `bytes`, and where the sum is direct, every other member's buffer whole.
int64_t AllReduceScratch(const AllReduceSpec& spec, int64_t bytes) {
  if (spec.method != quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE) return bytes;
  return bytes * static_cast<int64_t>(std::max<size_t>(1, spec.ranks.size()));
}

}  // namespace

std::vector<int64_t> Executor::Impl::DimsOf(int tensor, int64_t begin, int64_t end) const {
  const TensorInfo& info = graph_.tensors()[tensor];
  const bool batched = info.shape.HasBatch();
  std::vector<int64_t> dims =
      info.shape.Concrete(batched ? (Whole(begin, end) ? batch_ : end - begin) : 1);
  if (!batched && !Whole(begin, end) && !dims.empty()) dims[0] = end - begin;
  return dims;
}

// Where rows [begin, end) sit in an instance holding [kb, ke): the axis
// and the element offset along it.
static std::pair<int, int64_t> RowAxis(const TensorInfo& info, int64_t begin, int64_t kb) {
  if (info.shape.HasBatch()) {
    const int axis = info.shape.BatchAxis();
    return {axis, (begin - kb) * info.shape.dim(axis).value};
  }
  return {0, begin - kb};
}

absl::StatusOr<Tensor> Executor::Impl::Read(int device, int tensor, int64_t begin, int64_t end,
                                            int node) const {
  InstanceKey key;
  Tensor value;
  const TensorInfo& info = graph_.tensors()[tensor];
  bool found = false;
  if (node >= 0) {
    for (const auto& [read, from] : reads_from_[node]) {
      if (read == InstanceKey{tensor, begin, end}) {
        key = from;
        found = devices_[device]->store.Get(from, &value);
        break;
      }
    }
  }
  if (!found && !devices_[device]->store.FindContaining(tensor, begin, end, &key, &value)) {
    return absl::InternalError(
        absl::StrCat("'", info.name, "'",
                     Whole(begin, end) ? "" : absl::StrCat(" rows [", begin, ", ", end, ")"),
                     " is not on ", devices_[device]->id));
  }
  if ((key.begin == begin && key.end == end) || Whole(begin, end)) return value;
  const auto [axis, at] = RowAxis(info, begin, key.begin);
  const int64_t scale = info.shape.HasBatch() ? info.shape.dim(axis).value : 1;
  return SliceRows(value, axis, at, at + (end - begin) * scale);
}

absl::Status Executor::Impl::Compute(int node) {
  const auto& c = nodes_[node].ins->compute();
  const int op_id = op_ids_.at(c.op());
  const Op& op = graph_.ops[op_id];
  Device& dev = *devices_[nodes_[node].device];
  const int64_t b = c.begin(), e = c.end();
  const bool shard = is_update_[op_id] && !Whole(b, e);
  std::vector<Tensor> holds(op.inputs.size());
  std::vector<const Tensor*> in(op.inputs.size(), nullptr);
  std::vector<const Shape*> shapes(op.inputs.size(), nullptr);
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i].empty()) continue;
    const int t = tensor_ids_.at(op.inputs[i]);
    const TensorInfo& info = graph_.tensors()[t];
    const bool ranged = info.shape.HasBatch() || shard;
    ASSIGN_OR_RETURN(holds[i], Read(nodes_[node].device, t, ranged ? b : 0, ranged ? e : 0, node));
    in[i] = &holds[i];
    shapes[i] = &info.shape;
  }
  std::vector<std::vector<int64_t>> out_dims;
  std::vector<DType> out_types;
  std::vector<std::pair<int64_t, int64_t>> out_ranges;
  for (const std::string& name : op.outputs) {
    const int t = tensor_ids_.at(name);
    const TensorInfo& info = graph_.tensors()[t];
    const bool ranged = info.shape.HasBatch() || shard;
    out_ranges.push_back(ranged ? std::make_pair(b, e) : std::make_pair(int64_t{0}, int64_t{0}));
    out_dims.push_back(DimsOf(t, out_ranges.back().first, out_ranges.back().second));
    out_types.push_back(info.dtype);
  }
  std::vector<Tensor> outs(op.outputs.size());
  if (is_update_[op_id]) InPlaceOutputs(node, op, out_ranges, holds, &outs);
  KernelContext ctx(op, std::move(in), std::move(shapes), out_dims, out_types, &outs);
  const bool batched_op = !Whole(b, e) && !shard;
  ctx.step = options_.steps_before + step_;  // the training's step
  ctx.seed = options_.seed;
  ctx.local_batch = batched_op ? e - b : batch_;
  ctx.batch_offset = batched_op ? b : 0;
  ctx.global_batch = batch_;
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(kernels_[op_id](ctx));
  if (dev.slowdown > 1) {
    // The kernel as if the device were `slowdown` times slower: the extra
    // time is slept once it reaches a millisecond, and what a sleep
    // overshoots is credited to the next kernels.
    dev.slow_debt += (absl::Now() - start) * (dev.slowdown - 1);
    if (dev.slow_debt >= absl::Milliseconds(1)) {
      const absl::Time before = absl::Now();
      absl::SleepFor(dev.slow_debt);
      dev.slow_debt -= absl::Now() - before;
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].valid()) {
      ASSIGN_OR_RETURN(outs[i], Tensor::Zeros(out_types[i], out_dims[i]));
    }
    if (c.accumulate() && Whole(out_ranges[i].first, out_ranges[i].second)) {
      ASSIGN_OR_RETURN(outs[i], Accumulated(nodes_[node].device, op.outputs[i], outs[i]));
    }
    dev.store.Put(
        InstanceKey{tensor_ids_.at(op.outputs[i]), out_ranges[i].first, out_ranges[i].second},
        std::move(outs[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Executor::Impl::Accumulated(int device, const std::string& name,
                                                   const Tensor& part) const {
  Tensor before;
  if (!devices_[device]->store.Get(InstanceKey{tensor_ids_.at(name), 0, 0}, &before)) {
    return absl::InternalError(absl::StrCat("'", name, "' on ", devices_[device]->id,
                                            " is added to, but no earlier micro-batch wrote it"));
  }
  if (before.dtype() != DType::kF32 || part.dtype() != DType::kF32 ||
      before.numel() != part.numel()) {
    return absl::InternalError(
        absl::StrCat("'", name, "' on ", devices_[device]->id,
                     " is added to across micro-batches, which needs float32 values of one shape"));
  }
  // (A new value: a kernel's output may share its input's storage.)
  ASSIGN_OR_RETURN(Tensor sum, Tensor::Zeros(DType::kF32, part.dims()));
  for (int64_t i = 0; i < sum.numel(); ++i) sum.f32()[i] = before.f32()[i] + part.f32()[i];
  return sum;
}

absl::Status Executor::Impl::Concat(int node) {
  const auto& c = nodes_[node].ins->concat();
  const int t = tensor_ids_.at(c.target().tensor());
  const TensorInfo& info = graph_.tensors()[t];
  const int64_t tb = c.target().begin(), te = c.target().end();
  // Receives fill the target's other rows, before or after this.
  TensorStore& store = devices_[nodes_[node].device]->store;
  for (const auto& part : c.parts()) {
    ASSIGN_OR_RETURN(Tensor v, Read(nodes_[node].device, t, part.begin(), part.end(), node));
    const auto [axis, at] = RowAxis(info, part.begin(), tb);
    RETURN_IF_ERROR(
        store.WriteInto(InstanceKey{t, tb, te}, info.dtype, DimsOf(t, tb, te), axis, at, v));
  }
  return absl::OkStatus();
}

void Executor::Impl::SendRange(int node, const quilt::v1::TensorRange& range,
                               const std::string& peer_device, TagKind kind, uint64_t tag,
                               bool copy) {
  const int t = tensor_ids_.at(range.tensor());
  absl::StatusOr<Tensor> v = Read(nodes_[node].device, t, range.begin(), range.end(), node);
  if (!v.ok()) {
    Fail(node, v.status());
    return;
  }
  auto data = std::make_shared<Tensor>(copy ? v->Clone() : std::move(*v));
  const absl::Time start = absl::Now();
  transport_->Send(RankOfDevice(peer_device), MakeTag(step_, kind, tag), data->raw(),
                   static_cast<size_t>(data->bytes()), [this, node, data, start](absl::Status st) {
                     if (options_.trace) Record(node, start, true);
                     st.ok() ? Done(node) : Fail(node, st);
                   });
}

void Executor::Impl::StartSend(int node) {
  const auto& s = nodes_[node].ins->send();
  SendRange(node, s.range(), s.peer_device(), TagKind::kTransfer, s.tag(), /*copy=*/false);
}

void Executor::Impl::StartRecv(int node) {
  const auto& r = nodes_[node].ins->recv();
  const int t = tensor_ids_.at(r.range().tensor());
  const TensorInfo& info = graph_.tensors()[t];
  absl::StatusOr<Tensor> buf =
      Tensor::Empty(info.dtype, DimsOf(t, r.range().begin(), r.range().end()));
  if (!buf.ok()) {
    Fail(node, buf.status());
    return;
  }
  auto data = std::make_shared<Tensor>(std::move(*buf));
  const absl::Time start = absl::Now();
  transport_->Recv(
      RankOfDevice(r.peer_device()), MakeTag(step_, TagKind::kTransfer, r.tag()), data->raw(),
      static_cast<size_t>(data->bytes()), [this, node, data, t, start](absl::Status st) {
        if (options_.trace) Record(node, start, true);
        if (!st.ok()) {
          Fail(node, st);
          return;
        }
        const auto& r = nodes_[node].ins->recv();
        const InstanceKey into{t, r.into().begin(), r.into().end()};
        Device& dev = *devices_[nodes_[node].device];
        if (into.begin == r.range().begin() && into.end == r.range().end()) {
          dev.store.Put(into, *data);
          Done(node);
          return;
        }
        const TensorInfo& info = graph_.tensors()[t];
        const auto [axis, at] = RowAxis(info, r.range().begin(), into.begin);
        absl::Status w =
            dev.store.WriteInto(into, info.dtype, DimsOf(t, into.begin, into.end), axis, at, *data);
        w.ok() ? Done(node) : Fail(node, w);
      });
}

void Executor::Impl::StartAllReduce(int node) {
  const auto& ar = nodes_[node].ins->all_reduce();
  Device& dev = *devices_[nodes_[node].device];
  auto group = groups_.find(ar.group());
  if (group == groups_.end()) {
    Fail(node, absl::InvalidArgumentError(absl::StrCat("unknown group ", ar.group())));
    return;
  }
  AllReduceSpec spec;
  spec.collective_id = static_cast<uint64_t>(ar.collective_id());
  spec.step = step_;
  spec.method = ar.algorithm();
  for (size_t m = 0; m < group->second.size(); ++m) {
    const int d = group->second[m];
    if (d == dev.topo_index) spec.me = static_cast<int>(m);
    spec.ranks.push_back(device_rank_[d]);
    spec.nodes.push_back(device_rank_[d]);  // one process per node
  }
  if (auto b = group_node_bytes_.find(ar.group()); b != group_node_bytes_.end()) {
    spec.node_bytes_per_s = b->second;
  }
  if (ar.begin() != 0 || ar.end() != 0) {
    StartAllReduceSlice(node, std::move(spec));
    return;
  }
  // The sum goes into a fresh buffer: the partial tensors may share storage
  // with others.
  std::vector<int> ids;
  std::vector<Tensor> parts;
  int64_t total = 0;
  for (const std::string& name : ar.tensors()) {
    const int t = tensor_ids_.at(name);
    Tensor v;
    if (!dev.store.Get(InstanceKey{t, 0, 0}, &v) || v.dtype() != DType::kF32) {
      Fail(node, absl::InternalError("'" + name + "' is not on the device as float32"));
      return;
    }
    ids.push_back(t);
    parts.push_back(v);
    total += v.numel();
  }
  absl::StatusOr<Tensor> buf = Tensor::Empty(DType::kF32, {total});
  if (!buf.ok()) {
    Fail(node, buf.status());
    return;
  }
  auto sum = std::make_shared<Tensor>(std::move(*buf));
  int64_t at = 0;
  for (const Tensor& p : parts) {
    std::memcpy(sum->f32() + at, p.f32(), static_cast<size_t>(p.bytes()));
    at += p.numel();
  }
  spec.data = sum->f32();
  spec.owner = sum;
  spec.count = total;
  const absl::Time start = absl::Now();
  // (The parts are not held past the copy: each goes when its sum replaces
  // it, so the step holds the parts and the staging buffer, as simulated.)
  std::vector<std::vector<int64_t>> dims;
  std::vector<int64_t> counts;  // elements
  for (const Tensor& p : parts) {
    dims.push_back(p.dims());
    counts.push_back(p.numel());
  }
  parts.clear();
  const int64_t scratch = AllReduceScratch(spec, sum->bytes());
  dev.store.HoldScratch(scratch);
  auto done = [this, node, sum, ids, dims, counts, start, scratch](absl::Status st) {
    if (options_.trace) Record(node, start, true);
    Device& dev = *devices_[nodes_[node].device];
    absl::Status result = st;
    int64_t at = 0;
    for (size_t i = 0; result.ok() && i < ids.size(); ++i) {
      // Over the part where nothing but the store holds it (no view of it,
      // no transfer in flight), else into a fresh tensor: the step then
      // holds the parts and the staging buffer, as simulated, and no
      // part's copy beside them.
      const float* from = sum->f32() + at;
      at += counts[i];
      const InstanceKey key{ids[i], 0, 0};
      if (dev.store.OverwriteIfSole(key, dims[i], from)) continue;
      absl::StatusOr<Tensor> out = Tensor::Empty(DType::kF32, dims[i]);
      if (!out.ok()) {
        result = out.status();
        break;
      }
      std::memcpy(out->f32(), from, static_cast<size_t>(out->bytes()));
      dev.store.Put(key, std::move(*out));
    }
    dev.store.ReleaseScratch(scratch);
    result.ok() ? Done(node) : Fail(node, result);
  };
  quilt::StartAllReduce(transport_, spec, std::move(done));
}

void Executor::Impl::StartAllReduceSlice(int node, AllReduceSpec spec) {
  // Rows [begin, end) of dim 0 of one gradient, summed on their own and
  // written back into the gradient's instance (WriteSlice).
  const auto& ar = nodes_[node].ins->all_reduce();
  Device& dev = *devices_[nodes_[node].device];
  if (ar.tensors_size() != 1 || ar.begin() < 0 || ar.begin() >= ar.end()) {
    Fail(node,
         absl::InvalidArgumentError(absl::StrCat(
             "all-reduce ", ar.collective_id(), " sums rows [", ar.begin(), ", ", ar.end(), ") of ",
             ar.tensors_size(), " tensors; a slice is non-empty rows of one tensor")));
    return;
  }
  auto tid = tensor_ids_.find(ar.tensors(0));
  if (tid == tensor_ids_.end()) {
    Fail(node, absl::InvalidArgumentError("all-reduce of unknown tensor '" + ar.tensors(0) + "'"));
    return;
  }
  const int t = tid->second;
  Tensor v;
  if (!dev.store.Get(InstanceKey{t, 0, 0}, &v) || v.dtype() != DType::kF32) {
    Fail(node, absl::InternalError("'" + ar.tensors(0) + "' is not on the device as float32"));
    return;
  }
  absl::StatusOr<Tensor> rows = SliceRows(v, 0, ar.begin(), ar.end());
  if (!rows.ok()) {
    Fail(node, rows.status());
    return;
  }
  // The sum must not land in the gradient's own storage (it may be shared).
  if (rows->raw() == v.raw()) *rows = rows->Clone();
  auto sum = std::make_shared<Tensor>(std::move(*rows));
  spec.data = sum->f32();
  spec.owner = sum;
  spec.count = sum->numel();
  const int64_t at = ar.begin();
  const absl::Time start = absl::Now();
  const int64_t scratch = AllReduceScratch(spec, sum->bytes());
  dev.store.HoldScratch(scratch);
  quilt::StartAllReduce(transport_, spec,
                        [this, node, sum, t, at, start, scratch](absl::Status st) {
                          if (options_.trace) Record(node, start, true);
                          TensorStore& store = devices_[nodes_[node].device]->store;
                          if (st.ok()) st = store.WriteSlice(InstanceKey{t, 0, 0}, at, *sum);
                          store.ReleaseScratch(scratch);
                          st.ok() ? Done(node) : Fail(node, st);
                        });
}

void Executor::Impl::StartPush(int node) {
  const auto& p = nodes_[node].ins->ps_push();
  // A copy: the gradient instance may be summed into on this device.
  SendRange(node, p.gradient(), p.server_device(), TagKind::kPush, p.tag(), /*copy=*/true);
}

void Executor::Impl::StartAccumulate(int node) {
  const auto& a = nodes_[node].ins->ps_accumulate();
  const int t = tensor_ids_.at(a.gradient().tensor());
  const TensorInfo& info = graph_.tensors()[t];
  const int64_t b = a.gradient().begin(), e = a.gradient().end();
  const std::vector<int64_t> dims = DimsOf(t, b, e);
  struct State {
    absl::Mutex mu;
    int remaining = 0;
    absl::Status error;
    std::vector<Tensor> parts;
    // The receive buffers' bytes, held beside the store's instances (as
    // the simulator counts them) until the sum (set before any receive).
    int64_t scratch = 0;
  };
  auto state = std::make_shared<State>();
  state->remaining = a.push_tags_size();
  if (a.includes_local()) {
    absl::StatusOr<Tensor> local = Read(nodes_[node].device, t, b, e, node);
    if (!local.ok()) {
      Fail(node, local.status());
      return;
    }
    state->parts.push_back(*local);
  }
  const absl::Time start = absl::Now();
  auto finish = [this, node, state, t, b, e, dims, info, start]() {
    if (options_.trace) Record(node, start, true);
    TensorStore& store = devices_[nodes_[node].device]->store;
    absl::Status result = state->error;
    absl::StatusOr<Tensor> sum = Tensor::Zeros(info.dtype, dims);
    if (result.ok() && !sum.ok()) result = sum.status();
    if (result.ok() && info.dtype != DType::kF32) {
      result = absl::InternalError("parameter-server gradients must be float32");
    }
    if (result.ok()) {
      for (const Tensor& p : state->parts) {
        for (int64_t i = 0; i < sum->numel(); ++i) sum->f32()[i] += p.f32()[i];
      }
      store.Put(InstanceKey{t, b, e}, std::move(*sum));
    }
    // (The receive buffers go with the state, after the sum.)
    store.ReleaseScratch(state->scratch);
    result.ok() ? Done(node) : Fail(node, result);
  };
  if (state->remaining == 0) {
    finish();
    return;
  }
  // Every receive buffer first, counted at once, then the receives.
  std::vector<std::shared_ptr<Tensor>> buffers;
  for (int i = 0; i < a.push_tags_size(); ++i) {
    absl::StatusOr<Tensor> buf = Tensor::Empty(info.dtype, dims);
    if (!buf.ok()) {
      Fail(node, buf.status());
      return;
    }
    buffers.push_back(std::make_shared<Tensor>(std::move(*buf)));
    state->scratch += buffers.back()->bytes();
  }
  devices_[nodes_[node].device]->store.HoldScratch(state->scratch);
  for (int i = 0; i < a.push_tags_size(); ++i) {
    const int64_t tag = a.push_tags(i);
    std::shared_ptr<Tensor> data = buffers[i];
    const int from = device_rank_[push_device_.at(tag)];
    transport_->Recv(from, MakeTag(step_, TagKind::kPush, tag), data->raw(),
                     static_cast<size_t>(data->bytes()), [state, data, finish](absl::Status st) {
                       bool last = false;
                       {
                         absl::MutexLock lock(&state->mu);
                         if (!st.ok() && state->error.ok()) state->error = st;
                         if (st.ok()) state->parts.push_back(*data);
                         last = --state->remaining == 0;
                       }
                       if (last) finish();
                     });
  }
}

void Executor::Impl::StartPull(int node) {
  const auto& p = nodes_[node].ins->ps_pull();
  const int t = tensor_ids_.at(p.parameter().tensor());
  const TensorInfo& info = graph_.tensors()[t];
  const int64_t b = p.parameter().begin(), e = p.parameter().end();
  absl::StatusOr<Tensor> buf = Tensor::Empty(info.dtype, DimsOf(t, b, e));
  if (!buf.ok()) {
    Fail(node, buf.status());
    return;
  }
  auto data = std::make_shared<Tensor>(std::move(*buf));
  const absl::Time start = absl::Now();
  transport_->Recv(
      RankOfDevice(p.server_device()), MakeTag(step_, TagKind::kPull, p.tag()), data->raw(),
      static_cast<size_t>(data->bytes()), [this, node, data, t, b, e, start](absl::Status st) {
        if (options_.trace) Record(node, start, true);
        if (!st.ok()) {
          Fail(node, st);
          return;
        }
        const TensorInfo& info = graph_.tensors()[t];
        absl::Status w = devices_[nodes_[node].device]->store.WriteInto(
            InstanceKey{t, 0, 0}, info.dtype, DimsOf(t, 0, 0), 0, Whole(b, e) ? 0 : b, *data);
        w.ok() ? Done(node) : Fail(node, w);
      });
}

void Executor::Impl::ServePulls() {
  for (int i = 0; i < program_.devices_size(); ++i) {
    for (const auto& ins : program_.devices(i).instructions()) {
      if (!ins.has_ps_pull()) continue;
      const auto& p = ins.ps_pull();
      auto server = program_device_.find(p.server_device());
      if (server == program_device_.end() || device_rank_[server->second] != rank_) continue;
      int local = -1;
      for (size_t d = 0; d < devices_.size(); ++d) {
        if (devices_[d]->topo_index == server->second) local = static_cast<int>(d);
      }
      const std::string what =
          "serving the pull of '" + p.parameter().tensor() + "' by " + program_.devices(i).device();
      const int t = tensor_ids_.at(p.parameter().tensor());
      absl::StatusOr<Tensor> v = Read(local, t, p.parameter().begin(), p.parameter().end());
      BeginExtra();
      if (!v.ok()) {
        EndExtra(v.status(), what);
        continue;
      }
      auto data = std::make_shared<Tensor>(std::move(*v));
      transport_->Send(device_rank_[i], MakeTag(step_, TagKind::kPull, p.tag()), data->raw(),
                       static_cast<size_t>(data->bytes()),
                       [this, data, what](absl::Status st) { EndExtra(st, what); });
    }
  }
}

}  // namespace quilt
