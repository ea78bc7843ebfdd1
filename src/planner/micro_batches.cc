#include "src/planner/micro_batches.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt {
namespace {

using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using quilt::v1::TensorRange;

struct Entry {
  int device = 0;
  const Instruction* ins = nullptr;
  bool per_micro_batch = false;
  // Once per step, after a micro-batch's instruction (directly or not).
  bool late = false;
};

std::string Describe(const Instruction& ins) {
  switch (ins.kind_case()) {
    case Instruction::kCompute:
      return "op '" + ins.compute().op() + "'";
    case Instruction::kSend:
      return "the send of '" + ins.send().range().tensor() + "'";
    case Instruction::kRecv:
      return "the receive of '" + ins.recv().range().tensor() + "'";
    case Instruction::kAllReduce:
      return absl::StrCat("all-reduce ", ins.all_reduce().collective_id());
    default:
      return absl::StrCat("instruction ", ins.id());
  }
}

class Unroller {
 public:
  Unroller(const GraphIndex& ix, int k, int64_t rows) : ix_(ix), k_(k), rows_(rows) {}

  absl::Status Run(DistributedProgram* p);

 private:
  bool Batched(const TensorRange& r) const {
    const int t = ix_.Tensor(r.tensor(), r.tensor_index());
    return t >= 0 && ix_.Batched(t);
  }
  bool PerMicroBatch(const Instruction& ins) const;
  absl::Status Classify();
  void Shift(int j, TensorRange* r) const;
  Instruction Copy(int i, int j) const;

  const GraphIndex& ix_;
  const int k_;
  const int64_t rows_;          // per micro-batch
  std::vector<Entry> entries_;  // by id
  absl::flat_hash_map<int64_t, int> index_of_;
  // New ids: per step, and per micro-batch.
  std::vector<int64_t> step_id_;
  std::vector<std::vector<int64_t>> micro_id_;
  // Per device, a micro-batch's instructions nothing of it waits for
  // there, and whether an instruction waits for none of it there.
  std::vector<std::vector<int>> sinks_;
  std::vector<bool> source_;
  absl::flat_hash_set<int> summed_;  // tensors the passes add up
  int64_t tag_stride_ = 1, collective_stride_ = 1;
};

bool Unroller::PerMicroBatch(const Instruction& ins) const {
  switch (ins.kind_case()) {
    case Instruction::kCompute: {
      const int op = ix_.OpIndex(ins.compute().op(), ins.compute().op_index());
      return op >= 0 && WorksOnBatchRows(ix_, op);
    }
    case Instruction::kSend:
      return Batched(ins.send().range());
    case Instruction::kRecv:
      return Batched(ins.recv().range());
    case Instruction::kSplit:
      return Batched(ins.split().source());
    case Instruction::kConcat:
      return Batched(ins.concat().target());
    case Instruction::kAllReduce:
      for (const std::string& name : ins.all_reduce().tensors()) {
        const int t = ix_.Tensor(name);
        if (t >= 0 && ix_.Batched(t)) return true;
      }
      return false;
    default:
      return false;
  }
}

absl::Status Unroller::Classify() {
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.ins->id() < b.ins->id(); });
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!index_of_.emplace(entries_[i].ins->id(), static_cast<int>(i)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction id ", entries_[i].ins->id(), " appears twice"));
    }
  }
  for (Entry& e : entries_) {
    e.per_micro_batch = PerMicroBatch(*e.ins);
    if (!e.per_micro_batch || !e.ins->has_compute()) continue;
    const int op = ix_.OpIndex(e.ins->compute().op(), e.ins->compute().op_index());
    for (int t : ix_.Outputs(op)) {
      if (!ix_.Batched(t)) summed_.insert(t);
    }
  }
  for (Entry& e : entries_) {
    for (int64_t dep : e.ins->deps()) {
      auto it = index_of_.find(dep);
      if (it == index_of_.end() || dep >= e.ins->id()) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", e.ins->id(), " depends on ",
                                                       dep, ", which no earlier instruction is"));
      }
      const Entry& d = entries_[it->second];
      if (!e.per_micro_batch) {
        e.late |= d.per_micro_batch || d.late;
      } else if (d.late) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient accumulation: ", Describe(*e.ins), " works on batch rows but waits for ",
            Describe(*d.ins), ", which needs the whole batch's pass first"));
      }
    }
    if (!e.per_micro_batch || !e.ins->has_compute()) continue;
    const int op = ix_.OpIndex(e.ins->compute().op(), e.ins->compute().op_index());
    for (int t : ix_.Inputs(op)) {
      if (t >= 0 && summed_.contains(t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient accumulation: op '", e.ins->compute().op(),
            "' works on batch rows but reads '", ix_.graph().tensors()[t].name,
            "', a sum over the batch's rows (each micro-batch would need the others')"));
      }
    }
  }
  return absl::OkStatus();
}

void Unroller::Shift(int j, TensorRange* r) const {
  if (!Batched(*r)) return;
  if (r->begin() == 0 && r->end() == 0) r->set_end(rows_);
  r->set_begin(r->begin() + j * rows_);
  r->set_end(r->end() + j * rows_);
}

Instruction Unroller::Copy(int i, int j) const {
  const Entry& e = entries_[i];
  Instruction out = *e.ins;
  out.clear_deps();
  if (!e.per_micro_batch) {
    out.set_id(step_id_[i]);
    for (int64_t dep : e.ins->deps()) {
      const int d = index_of_.at(dep);
      out.add_deps(entries_[d].per_micro_batch ? micro_id_[k_ - 1][d] : step_id_[d]);
    }
    return out;
  }
  out.set_id(micro_id_[j][i]);
  out.set_micro_batch(j + 1);
  for (int64_t dep : e.ins->deps()) {
    const int d = index_of_.at(dep);
    out.add_deps(entries_[d].per_micro_batch ? micro_id_[j][d] : step_id_[d]);
  }
  if (j > 0 && source_[i]) {
    for (int s : sinks_[e.device]) out.add_deps(micro_id_[j - 1][s]);
  }
  switch (out.kind_case()) {
    case Instruction::kCompute: {
      auto* c = out.mutable_compute();
      if (c->begin() == 0 && c->end() == 0) c->set_end(rows_);
      c->set_begin(c->begin() + j * rows_);
      c->set_end(c->end() + j * rows_);
      const int op = ix_.OpIndex(c->op(), c->op_index());
      bool sums = false;
      for (int t : ix_.Outputs(op)) sums |= !ix_.Batched(t);
      c->set_accumulate(j > 0 && sums);
      break;
    }
    case Instruction::kSend:
      Shift(j, out.mutable_send()->mutable_range());
      out.mutable_send()->set_tag(out.send().tag() + j * tag_stride_);
      break;
    case Instruction::kRecv:
      Shift(j, out.mutable_recv()->mutable_range());
      if (out.recv().has_into()) Shift(j, out.mutable_recv()->mutable_into());
      out.mutable_recv()->set_tag(out.recv().tag() + j * tag_stride_);
      break;
    case Instruction::kSplit:
      Shift(j, out.mutable_split()->mutable_source());
      for (auto& part : *out.mutable_split()->mutable_parts()) Shift(j, &part);
      break;
    case Instruction::kConcat:
      Shift(j, out.mutable_concat()->mutable_target());
      for (auto& part : *out.mutable_concat()->mutable_parts()) Shift(j, &part);
      break;
    case Instruction::kAllReduce:
      out.mutable_all_reduce()->set_collective_id(out.all_reduce().collective_id() +
                                                  j * collective_stride_);
      break;
    default:
      break;
  }
  return out;
}

absl::Status Unroller::Run(DistributedProgram* p) {
  int64_t max_tag = 0, max_collective = 0;
  std::vector<std::vector<Instruction>> originals(p->devices_size());
  for (int d = 0; d < p->devices_size(); ++d) {
    originals[d].assign(p->devices(d).instructions().begin(), p->devices(d).instructions().end());
  }
  for (int d = 0; d < p->devices_size(); ++d) {
    for (const Instruction& ins : originals[d]) {
      entries_.push_back(Entry{d, &ins});
      max_tag = std::max(
          {max_tag, ins.send().tag(), ins.recv().tag(), ins.ps_push().tag(), ins.ps_pull().tag()});
      max_collective = std::max(max_collective, ins.all_reduce().collective_id());
    }
  }
  tag_stride_ = max_tag + 1;
  collective_stride_ = max_collective + 1;
  RETURN_IF_ERROR(Classify());
  const int n = static_cast<int>(entries_.size());
  // Sources and sinks of each device's micro-batch.
  source_.assign(n, true);
  std::vector<bool> awaited(n, false);
  for (int i = 0; i < n; ++i) {
    if (!entries_[i].per_micro_batch) continue;
    for (int64_t dep : entries_[i].ins->deps()) {
      const int d = index_of_.at(dep);
      if (!entries_[d].per_micro_batch || entries_[d].device != entries_[i].device) continue;
      source_[i] = false;
      awaited[d] = true;
    }
  }
  sinks_.assign(p->devices_size(), {});
  for (int i = 0; i < n; ++i) {
    if (entries_[i].per_micro_batch && !awaited[i]) sinks_[entries_[i].device].push_back(i);
  }
  // Ids in a topological order: what runs before the micro-batches, each
  // micro-batch, what runs after.
  int64_t next = 1;
  step_id_.assign(n, -1);
  micro_id_.assign(k_, std::vector<int64_t>(n, -1));
  for (int i = 0; i < n; ++i) {
    if (!entries_[i].per_micro_batch && !entries_[i].late) step_id_[i] = next++;
  }
  for (int j = 0; j < k_; ++j) {
    for (int i = 0; i < n; ++i) {
      if (entries_[i].per_micro_batch) micro_id_[j][i] = next++;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (entries_[i].late) step_id_[i] = next++;
  }
  std::vector<std::vector<Instruction>> out(p->devices_size());
  auto emit = [&](int i, int j) { out[entries_[i].device].push_back(Copy(i, j)); };
  for (int i = 0; i < n; ++i) {
    if (!entries_[i].per_micro_batch && !entries_[i].late) emit(i, 0);
  }
  for (int j = 0; j < k_; ++j) {
    for (int i = 0; i < n; ++i) {
      if (entries_[i].per_micro_batch) emit(i, j);
    }
  }
  for (int i = 0; i < n; ++i) {
    if (entries_[i].late) emit(i, 0);
  }
  for (int d = 0; d < p->devices_size(); ++d) {
    auto* dp = p->mutable_devices(d);
    dp->clear_instructions();
    for (Instruction& ins : out[d]) *dp->add_instructions() = std::move(ins);
    std::vector<TensorRange> feeds(dp->feeds().begin(), dp->feeds().end());
    dp->clear_feeds();
    for (const TensorRange& f : feeds) {
      if (!Batched(f)) {
        *dp->add_feeds() = f;
        continue;
      }
      for (int j = 0; j < k_; ++j) {
        TensorRange* r = dp->add_feeds();
        *r = f;
        Shift(j, r);
      }
    }
  }
  const int64_t batch = rows_ * k_;
  p->set_global_batch(batch);
  p->set_micro_batches(k_);
  p->mutable_strategy()->set_global_batch(batch);
  p->mutable_strategy()->set_micro_batches(k_);
  return absl::OkStatus();
}

}  // namespace

bool WorksOnBatchRows(const GraphIndex& ix, int op) {
  for (int t : ix.Inputs(op)) {
    if (t >= 0 && ix.Batched(t)) return true;
  }
  for (int t : ix.Outputs(op)) {
    if (ix.Batched(t)) return true;
  }
  return false;
}

absl::StatusOr<int64_t> MicroBatchRows(int64_t global_batch, int micro_batches) {
  if (micro_batches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro_batches must be 0 or more, not ", micro_batches));
  }
  if (micro_batches <= 1) return global_batch;
  if (micro_batches > kMaxMicroBatches) {
    return absl::InvalidArgumentError(
        absl::StrCat(micro_batches, " micro-batches are more than ", kMaxMicroBatches,
                     ", the most a program holds (it repeats the passes once per micro-batch)"));
  }
  if (global_batch % micro_batches != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the batch ", global_batch,
                                                   " does not split into ", micro_batches,
                                                   " micro-batches of equal rows"));
  }
  return global_batch / micro_batches;
}

absl::Status UnrollMicroBatches(const GraphIndex& index, int micro_batches,
                                DistributedProgram* program) {
  if (micro_batches <= 1) return absl::OkStatus();
  Unroller u(index, micro_batches, program->global_batch());
  return u.Run(program);
}

}  // namespace quilt
