#include "src/planner/micro_batches.h"

#include <algorithm>
#include <map>
#include <set>
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

constexpr int kHeld = -2;

struct Entry {
  int device = 0;
  const Instruction* ins = nullptr;
  bool per_micro_batch = false;
  // Once per step, after a micro-batch's instruction (directly or not).
  bool late = false;
};

// One lowering's instructions: the larger micro-batches' (the program's
// own, whose per-step instructions are the step's) or the smaller ones'.
struct Pass {
  int64_t rows = 0;
  std::vector<std::vector<Instruction>> originals;  // by device
  // By the step's device (the larger pass's program's index): this
  // pass's program's device there, or -1 where it has none.
  std::vector<int> own_device;
  std::vector<Entry> entries;  // by id
  absl::flat_hash_map<int64_t, int> index_of;
  // Per device, the instructions of a micro-batch nothing of it waits
  // for there, and whether an instruction waits for none of it there.
  std::vector<std::vector<int>> sinks;
  std::vector<bool> source;
  // Ranges the program keeps on a device across steps (RangeKey, by the
  // step's device).
  absl::flat_hash_set<std::string> persistent;
  // The smaller micro-batches' pass: per entry run once per step, the
  // larger pass's entry it is, or stands for (-1: none; kHeld: a receive
  // of what the larger pass keeps on the device, which needs none).
  std::vector<int> step_in_larger;
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

// What a per-step instruction does on its device, whatever its id, order
// and tags: equal in two lowerings of one strategy at different rows.
std::string StepKey(int device, const Instruction& ins) {
  Instruction k = ins;
  k.clear_id();
  k.clear_deps();
  k.clear_priority();
  if (k.has_send()) k.mutable_send()->clear_tag();
  if (k.has_recv()) k.mutable_recv()->clear_tag();
  if (k.has_ps_push()) k.mutable_ps_push()->clear_tag();
  if (k.has_ps_pull()) k.mutable_ps_pull()->clear_tag();
  if (k.has_all_reduce()) k.mutable_all_reduce()->clear_collective_id();
  return absl::StrCat(device, ":", k.SerializeAsString());
}

// A range of a tensor on a device, whatever its index hint.
std::string RangeKey(int device, const std::string& tensor, int64_t begin, int64_t end) {
  return absl::StrCat(device, ":", tensor, ":", begin, ":", end);
}
std::string RangeKey(int device, const TensorRange& r) {
  return RangeKey(device, r.tensor(), r.begin(), r.end());
}

// Where a per-step receive writes on its device, whatever its peer.
std::string ReceivedKey(int device, const Instruction& ins) {
  return RangeKey(device, ins.recv().has_into() ? ins.recv().into() : ins.recv().range());
}

class Unroller {
 public:
  Unroller(const GraphIndex& ix, int64_t batch, int k) : ix_(ix), batch_(batch), k_(k) {}

  absl::Status Run(DistributedProgram* p, const DistributedProgram* smaller);

 private:
  bool Batched(const TensorRange& r) const {
    const int t = ix_.Tensor(r.tensor(), r.tensor_index());
    return t >= 0 && ix_.Batched(t);
  }
  bool PerMicroBatch(const Instruction& ins) const;
  // `p`'s instructions, their devices by `step`'s index (the larger
  // pass's program; `p` itself for that pass).
  absl::Status Load(const DistributedProgram& p, const DistributedProgram& step, int64_t rows,
                    Pass* pass);
  absl::Status Classify(Pass* pass) const;
  // Entry::late of every per-step entry of `pass` (after a micro-batch's
  // instruction on its device, or a receive of a send that is).
  void MarkLate(Pass* pass) const;
  static void SourcesAndSinks(int devices, Pass* pass);
  absl::Status MapSteps();
  // The smaller micro-batches run no op the larger ones leave out where
  // that matters: see the body.
  absl::Status CheckSmallerOps() const;
  // A device of the step's program, by name.
  const std::string& DeviceName(int device) const { return device_names_[device]; }
  // Micro-batch j's pass, and where its rows begin.
  const Pass& PassOf(int j) const { return j < first_larger_ ? passes_[1] : passes_[0]; }
  int64_t Offset(int j) const { return MicroBatchRange(batch_, k_, j).begin; }
  void Shift(int j, TensorRange* r) const;
  // A copy made on the program's arena (where it has one; else the heap,
  // owned by whatever it is added to). j < 0: a per-step instruction.
  Instruction* Copy(int i, int j) const;

  const GraphIndex& ix_;
  const int64_t batch_;
  const int k_;
  std::vector<Pass> passes_;  // the larger micro-batches' [, the smaller ones']
  int first_larger_ = 0;      // the first micro-batch of passes_[0]
  // New ids: per step (passes_[0]'s entries), and per micro-batch (its
  // pass's entries). Micro-batch j's tags and collective ids are its
  // pass's moved by (j + 1) strides, past the step's own (the two passes
  // number theirs alike).
  std::vector<int64_t> step_id_;
  std::vector<std::vector<int64_t>> micro_id_;
  int64_t tag_stride_ = 1, collective_stride_ = 1;
  // Micro-batches a device may have begun and not finished
  // (Strategy.micro_batches_in_flight); where more than one, each
  // micro-batch's priorities are lifted by lift_ over the next one's, and
  // what runs before the micro-batches over them all.
  int in_flight_ = 1;
  double lift_ = 0;
  std::vector<std::string> device_names_;     // by the step's device
  google::protobuf::Arena* arena_ = nullptr;  // the program's
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

absl::Status Unroller::Load(const DistributedProgram& p, const DistributedProgram& step,
                            int64_t rows, Pass* pass) {
  pass->rows = rows;
  absl::flat_hash_map<std::string, int> step_index;
  for (int d = 0; d < step.devices_size(); ++d) step_index[step.devices(d).device()] = d;
  pass->own_device.assign(step.devices_size(), -1);
  pass->originals.resize(p.devices_size());
  for (int d = 0; d < p.devices_size(); ++d) {
    pass->originals[d].assign(p.devices(d).instructions().begin(),
                              p.devices(d).instructions().end());
    auto it = step_index.find(p.devices(d).device());
    if (it == step_index.end()) {
      // (Its weight gradients would miss the step's aggregation.)
      return absl::InvalidArgumentError(absl::StrCat(
          "micro-batches of ", rows, " rows run on ", p.devices(d).device(),
          ", which the micro-batches of ", rows + 1, " rows and the step's updates leave out"));
    }
    pass->own_device[it->second] = d;
    for (const TensorRange& r : p.devices(d).persistent()) {
      pass->persistent.insert(RangeKey(it->second, r));
    }
    for (const Instruction& ins : pass->originals[d]) {
      pass->entries.push_back(Entry{it->second, &ins});
      tag_stride_ = std::max({tag_stride_, ins.send().tag() + 1, ins.recv().tag() + 1,
                              ins.ps_push().tag() + 1, ins.ps_pull().tag() + 1});
      collective_stride_ = std::max(collective_stride_, ins.all_reduce().collective_id() + 1);
    }
  }
  RETURN_IF_ERROR(Classify(pass));
  SourcesAndSinks(step.devices_size(), pass);
  return absl::OkStatus();
}

absl::Status Unroller::Classify(Pass* pass) const {
  std::vector<Entry>& entries = pass->entries;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.ins->id() < b.ins->id(); });
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!pass->index_of.emplace(entries[i].ins->id(), static_cast<int>(i)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction id ", entries[i].ins->id(), " appears twice"));
    }
  }
  absl::flat_hash_set<int> summed;  // tensors the passes add up
  for (Entry& e : entries) {
    e.per_micro_batch = PerMicroBatch(*e.ins);
    if (!e.per_micro_batch || !e.ins->has_compute()) continue;
    const int op = ix_.OpIndex(e.ins->compute().op(), e.ins->compute().op_index());
    for (int t : ix_.Outputs(op)) {
      if (!ix_.Batched(t)) summed.insert(t);
    }
  }
  for (Entry& e : entries) {
    for (int64_t dep : e.ins->deps()) {
      auto it = pass->index_of.find(dep);
      if (it == pass->index_of.end() || dep >= e.ins->id()) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", e.ins->id(), " depends on ",
                                                       dep, ", which no earlier instruction is"));
      }
    }
  }
  MarkLate(pass);
  for (Entry& e : entries) {
    for (int64_t dep : e.ins->deps()) {
      const Entry& d = entries[pass->index_of.at(dep)];
      if (e.per_micro_batch && d.late) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient accumulation: ", Describe(*e.ins), " works on batch rows but waits for ",
            Describe(*d.ins), ", which needs the whole batch's pass first"));
      }
    }
    if (!e.per_micro_batch || !e.ins->has_compute()) continue;
    const int op = ix_.OpIndex(e.ins->compute().op(), e.ins->compute().op_index());
    for (int t : ix_.Inputs(op)) {
      if (t >= 0 && summed.contains(t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient accumulation: op '", e.ins->compute().op(),
            "' works on batch rows but reads '", ix_.graph().tensors()[t].name,
            "', a sum over the batch's rows (each micro-batch would need the others')"));
      }
    }
  }
  return absl::OkStatus();
}

void Unroller::MarkLate(Pass* pass) const {
  std::vector<Entry>& entries = pass->entries;
  // A receive runs after its send, on another device: it is late where
  // the send is (a sum another device made of its micro-batches' rows).
  absl::flat_hash_map<std::pair<std::string, int64_t>, int> send_of;  // (to, tag) -> entry
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    if (entries[i].ins->has_send()) {
      send_of[{entries[i].ins->send().peer_device(), entries[i].ins->send().tag()}] = i;
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (Entry& e : entries) {
      if (e.per_micro_batch || e.late) continue;
      bool late = false;
      for (int64_t dep : e.ins->deps()) {
        const Entry& d = entries[pass->index_of.at(dep)];
        late |= d.per_micro_batch || d.late;
      }
      if (e.ins->has_recv()) {
        auto it = send_of.find({DeviceName(e.device), e.ins->recv().tag()});
        if (it != send_of.end()) late |= entries[it->second].late;
      }
      e.late = late;
      changed |= late;
    }
  }
}

void Unroller::SourcesAndSinks(int devices, Pass* pass) {
  const std::vector<Entry>& entries = pass->entries;
  const int n = static_cast<int>(entries.size());
  pass->source.assign(n, true);
  std::vector<bool> awaited(n, false);
  for (int i = 0; i < n; ++i) {
    if (!entries[i].per_micro_batch) continue;
    for (int64_t dep : entries[i].ins->deps()) {
      const int d = pass->index_of.at(dep);
      if (!entries[d].per_micro_batch || entries[d].device != entries[i].device) continue;
      pass->source[i] = false;
      awaited[d] = true;
    }
  }
  pass->sinks.assign(devices, {});
  for (int i = 0; i < n; ++i) {
    if (entries[i].per_micro_batch && !awaited[i]) pass->sinks[entries[i].device].push_back(i);
  }
}

absl::Status Unroller::MapSteps() {
  if (passes_.size() < 2) return absl::OkStatus();
  const Pass& larger = passes_[0];
  Pass& smaller = passes_[1];
  absl::flat_hash_map<std::string, std::vector<int>> by_key;
  for (int i = static_cast<int>(larger.entries.size()) - 1; i >= 0; --i) {
    const Entry& e = larger.entries[i];
    if (!e.per_micro_batch) by_key[StepKey(e.device, *e.ins)].push_back(i);
  }
  smaller.step_in_larger.assign(smaller.entries.size(), -1);
  for (size_t i = 0; i < smaller.entries.size(); ++i) {
    const Entry& e = smaller.entries[i];
    if (e.per_micro_batch) continue;
    auto it = by_key.find(StepKey(e.device, *e.ins));
    if (it == by_key.end() || it->second.empty()) continue;
    smaller.step_in_larger[i] = it->second.back();
    it->second.pop_back();
  }
  // Two lowerings at different rows may fetch a weight (or a value made
  // of weights alone) from different holders (the first that holds it,
  // which depends on which devices have rows), or one may keep or compute
  // it on a device the other fetches it to: a receive the larger pass
  // lacks is the larger pass's writer of that range there, where that runs
  // before the micro-batches (a receive or an op), or the range it keeps.
  absl::flat_hash_map<std::string, int> written;
  for (int i = 0; i < static_cast<int>(larger.entries.size()); ++i) {
    const Entry& e = larger.entries[i];
    if (e.per_micro_batch || e.late) continue;
    if (e.ins->has_recv()) written.try_emplace(ReceivedKey(e.device, *e.ins), i);
    if (!e.ins->has_compute()) continue;
    const int op = ix_.OpIndex(e.ins->compute().op(), e.ins->compute().op_index());
    if (op < 0) continue;
    for (int t : ix_.Outputs(op)) {
      if (t >= 0) written.try_emplace(RangeKey(e.device, ix_.graph().tensors()[t].name, 0, 0), i);
    }
  }
  for (size_t i = 0; i < smaller.entries.size(); ++i) {
    const Entry& e = smaller.entries[i];
    if (e.per_micro_batch || e.late || !e.ins->has_recv() || smaller.step_in_larger[i] >= 0) {
      continue;
    }
    const std::string key = ReceivedKey(e.device, *e.ins);
    auto it = written.find(key);
    if (it != written.end()) {
      smaller.step_in_larger[i] = it->second;
    } else if (larger.persistent.contains(key)) {
      smaller.step_in_larger[i] = kHeld;
    }
  }
  RETURN_IF_ERROR(CheckSmallerOps());
  // The smaller micro-batches wait only on per-step instructions the
  // larger pass has too.
  for (const Entry& e : smaller.entries) {
    if (!e.per_micro_batch) continue;
    for (int64_t dep : e.ins->deps()) {
      const int d = smaller.index_of.at(dep);
      if (smaller.entries[d].per_micro_batch || smaller.step_in_larger[d] != -1) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "micro-batches of ", smaller.rows, " and ", larger.rows, " rows: ", Describe(*e.ins),
          " waits for ", Describe(*smaller.entries[d].ins), ", which the step at ", larger.rows,
          " rows lacks"));
    }
  }
  return absl::OkStatus();
}

absl::Status Unroller::CheckSmallerOps() const {
  const Pass& larger = passes_[0];
  const Pass& smaller = passes_[1];
  // A split of fewer rows may give a device rows of a group that the
  // larger split gives none (B · r / R rounded by remainders; the lowering
  // places the smaller micro-batches so that it does not:
  // PlaceSmallerMicroBatches): there the smaller micro-batches' sums over
  // the rows (weight gradients) would miss the step's aggregation, and the
  // weights they read would not be kept.
  absl::flat_hash_set<std::pair<int, int>> ran;  // (device, op) of the larger micro-batches
  for (const Entry& e : larger.entries) {
    if (!e.per_micro_batch || !e.ins->has_compute()) continue;
    ran.insert({e.device, ix_.OpIndex(e.ins->compute().op(), e.ins->compute().op_index())});
  }
  for (const Entry& e : smaller.entries) {
    if (!e.per_micro_batch || !e.ins->has_compute()) continue;
    const int op = ix_.OpIndex(e.ins->compute().op(), e.ins->compute().op_index());
    if (op < 0) continue;
    const std::string where =
        absl::StrCat("micro-batches of ", smaller.rows, " and ", larger.rows, " rows: op '",
                     e.ins->compute().op(), "' runs on ", DeviceName(e.device),
                     " in the micro-batches of ", smaller.rows, " rows");
    bool sums = false;
    for (int t : ix_.Outputs(op)) sums |= t >= 0 && !ix_.Batched(t);
    if (sums && !ran.contains({e.device, op})) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " and not in those of ", larger.rows,
                       " (its sum over their rows would miss the step's aggregation)"));
    }
    for (int t : ix_.Inputs(op)) {
      if (t < 0 || ix_.Batched(t)) continue;
      const std::string key = RangeKey(e.device, ix_.graph().tensors()[t].name, 0, 0);
      if (smaller.persistent.contains(key) && !larger.persistent.contains(key)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " and reads '", ix_.graph().tensors()[t].name,
                         "', which the step at ", larger.rows, " rows does not keep there"));
      }
    }
  }
  // An op that runs over the whole micro-batch on several devices (the
  // lookups of a table gathered by sparse lookup, each device for its part
  // of the table) needs the same devices in both.
  auto whole_on = [&](const Pass& pass) {
    std::map<int, std::set<int>> out;  // op -> devices
    for (const Entry& e : pass.entries) {
      if (!e.per_micro_batch || !e.ins->has_compute()) continue;
      const auto& c = e.ins->compute();
      if (c.begin() != 0 || (c.end() != 0 && c.end() != pass.rows)) continue;
      out[ix_.OpIndex(c.op(), c.op_index())].insert(e.device);
    }
    return out;
  };
  const std::map<int, std::set<int>> large = whole_on(larger), small = whole_on(smaller);
  for (const auto& [op, devices] : large) {
    auto it = small.find(op);
    if (devices.size() < 2 || op < 0 || (it != small.end() && it->second == devices)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("micro-batches of ", smaller.rows, " and ", larger.rows, " rows: op '",
                     ix_.graph().ops[op].name, "' runs over the whole micro-batch on ",
                     devices.size(), " devices in the micro-batches of ", larger.rows,
                     " rows and on ", it == small.end() ? 0 : it->second.size(), " in those of ",
                     smaller.rows, " (each device's part of a table gathered by sparse lookup)"));
  }
  return absl::OkStatus();
}

void Unroller::Shift(int j, TensorRange* r) const {
  if (!Batched(*r)) return;
  if (r->begin() == 0 && r->end() == 0) r->set_end(PassOf(j).rows);
  r->set_begin(r->begin() + Offset(j));
  r->set_end(r->end() + Offset(j));
}

Instruction* Unroller::Copy(int i, int j) const {
  Instruction* made = google::protobuf::Arena::CreateMessage<Instruction>(arena_);
  Instruction& out = *made;
  if (j < 0) {
    const Entry& e = passes_[0].entries[i];
    out.CopyFrom(*e.ins);
    out.clear_deps();
    out.set_id(step_id_[i]);
    if (!e.late) out.set_priority(out.priority() + (k_ + 1) * lift_);
    for (int64_t dep : e.ins->deps()) {
      const int d = passes_[0].index_of.at(dep);
      // (The last micro-batch is the larger pass's.)
      out.add_deps(passes_[0].entries[d].per_micro_batch ? micro_id_[k_ - 1][d] : step_id_[d]);
    }
    return made;
  }
  const Pass& pass = PassOf(j);
  const Entry& e = pass.entries[i];
  out.CopyFrom(*e.ins);
  out.clear_deps();
  out.set_id(micro_id_[j][i]);
  out.set_micro_batch(j + 1);
  out.set_priority(out.priority() + (k_ - j) * lift_);
  for (int64_t dep : e.ins->deps()) {
    const int d = pass.index_of.at(dep);
    if (pass.entries[d].per_micro_batch) {
      out.add_deps(micro_id_[j][d]);
    } else if (&pass == &passes_[0]) {
      out.add_deps(step_id_[d]);
    } else if (pass.step_in_larger[d] != kHeld) {
      out.add_deps(step_id_[pass.step_in_larger[d]]);
    }
  }
  if (j >= in_flight_ && pass.source[i]) {
    const int before = j - in_flight_;
    for (int s : PassOf(before).sinks[e.device]) out.add_deps(micro_id_[before][s]);
  }
  switch (out.kind_case()) {
    case Instruction::kCompute: {
      auto* c = out.mutable_compute();
      if (c->begin() == 0 && c->end() == 0) c->set_end(pass.rows);
      c->set_begin(c->begin() + Offset(j));
      c->set_end(c->end() + Offset(j));
      c->set_accumulate(false);  // (set by Run once all are made)
      break;
    }
    case Instruction::kSend:
      Shift(j, out.mutable_send()->mutable_range());
      out.mutable_send()->set_tag(out.send().tag() + (j + 1) * tag_stride_);
      break;
    case Instruction::kRecv:
      Shift(j, out.mutable_recv()->mutable_range());
      if (out.recv().has_into()) Shift(j, out.mutable_recv()->mutable_into());
      out.mutable_recv()->set_tag(out.recv().tag() + (j + 1) * tag_stride_);
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
                                                  (j + 1) * collective_stride_);
      break;
    default:
      break;
  }
  return made;
}

absl::Status Unroller::Run(DistributedProgram* p, const DistributedProgram* smaller) {
  passes_.resize(smaller != nullptr ? 2 : 1);
  arena_ = p->GetArena();
  for (const auto& dp : p->devices()) device_names_.push_back(dp.device());
  const MicroBatchSpan last = MicroBatchRange(batch_, k_, k_ - 1);
  RETURN_IF_ERROR(Load(*p, *p, last.end - last.begin, &passes_[0]));
  if (smaller != nullptr) {
    RETURN_IF_ERROR(Load(*smaller, *p, last.end - last.begin - 1, &passes_[1]));
    first_larger_ = k_ - static_cast<int>(batch_ % k_);
  }
  RETURN_IF_ERROR(MapSteps());
  in_flight_ = std::clamp(p->strategy().micro_batches_in_flight(), 1, k_);
  if (in_flight_ > 1) {
    double lo = 0, hi = 0;
    for (const Pass& pass : passes_) {
      for (const Entry& e : pass.entries) {
        lo = std::min(lo, e.ins->priority());
        hi = std::max(hi, e.ins->priority());
      }
    }
    lift_ = hi - lo + 1;
  }
  const std::vector<Entry>& steps = passes_[0].entries;
  const int n = static_cast<int>(steps.size());
  // Ids in a topological order: what runs before the micro-batches, each
  // micro-batch, what runs after.
  int64_t next = 1;
  step_id_.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    if (!steps[i].per_micro_batch && !steps[i].late) step_id_[i] = next++;
  }
  micro_id_.resize(k_);
  for (int j = 0; j < k_; ++j) {
    const std::vector<Entry>& entries = PassOf(j).entries;
    micro_id_[j].assign(entries.size(), -1);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].per_micro_batch) micro_id_[j][i] = next++;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (steps[i].late) step_id_[i] = next++;
  }
  // (Made on the program's arena and added to it below, each once: the
  // instructions they copy are the program's until then.)
  std::vector<std::vector<Instruction*>> out(p->devices_size());
  for (int i = 0; i < n; ++i) {
    if (!steps[i].per_micro_batch && !steps[i].late) out[steps[i].device].push_back(Copy(i, -1));
  }
  for (int j = 0; j < k_; ++j) {
    const std::vector<Entry>& entries = PassOf(j).entries;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].per_micro_batch) out[entries[i].device].push_back(Copy(i, j));
    }
  }
  for (int i = 0; i < n; ++i) {
    if (steps[i].late) out[steps[i].device].push_back(Copy(i, -1));
  }
  // Outputs without batch rows add to what an earlier micro-batch wrote
  // on the device (a device the smaller micro-batches leave out writes
  // first in a larger one), after it where micro-batches overlap.
  for (std::vector<Instruction*>& device : out) {
    absl::flat_hash_map<int, int> first;     // op -> the micro-batch that first wrote it
    absl::flat_hash_map<int, int64_t> last;  // op -> its last write's id
    for (Instruction* made : device) {
      Instruction& ins = *made;
      if (!ins.has_compute() || ins.micro_batch() == 0) continue;
      const int op = ix_.OpIndex(ins.compute().op(), ins.compute().op_index());
      bool sums = false;
      for (int t : ix_.Outputs(op)) sums |= !ix_.Batched(t);
      if (!sums) continue;
      const int wrote = first.try_emplace(op, ins.micro_batch()).first->second;
      ins.mutable_compute()->set_accumulate(wrote < ins.micro_batch());
      if (in_flight_ > 1 && wrote < ins.micro_batch()) ins.add_deps(last.at(op));
      last[op] = ins.id();
    }
  }
  for (int d = 0; d < p->devices_size(); ++d) {
    auto* dp = p->mutable_devices(d);
    dp->clear_instructions();
    for (Instruction* ins : out[d]) dp->mutable_instructions()->AddAllocated(ins);
    std::vector<TensorRange> feeds;
    for (const TensorRange& f : dp->feeds()) {
      if (!Batched(f)) feeds.push_back(f);
    }
    for (int j = 0; j < k_; ++j) {
      const int own = PassOf(j).own_device[d];
      if (own < 0) continue;
      for (const TensorRange& f : (j < first_larger_ ? *smaller : *p).devices(own).feeds()) {
        if (!Batched(f)) continue;
        feeds.push_back(f);
        Shift(j, &feeds.back());
      }
    }
    dp->clear_feeds();
    for (TensorRange& f : feeds) *dp->add_feeds() = std::move(f);
  }
  p->set_global_batch(batch_);
  p->set_micro_batches(k_);
  p->mutable_strategy()->set_global_batch(batch_);
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
  if (micro_batches > global_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch ", global_batch, " has fewer rows than ", micro_batches, " micro-batches"));
  }
  return (global_batch + micro_batches - 1) / micro_batches;
}

std::string DescribeMicroBatches(int64_t global_batch, int micro_batches) {
  const int64_t base = global_batch / std::max(1, micro_batches);
  return global_batch % std::max(1, micro_batches) == 0
             ? absl::StrCat(micro_batches, " micro-batches of ", base, " rows")
             : absl::StrCat(micro_batches, " micro-batches of ", base, " or ", base + 1, " rows");
}

std::string DescribeInFlight(int in_flight) {
  return in_flight > 1 ? absl::StrCat("up to ", in_flight, " in flight on each device") : "";
}

absl::Status UnrollMicroBatches(const GraphIndex& index, int64_t global_batch, int micro_batches,
                                DistributedProgram* program, const DistributedProgram* smaller) {
  const int in_flight = program->strategy().micro_batches_in_flight();
  if (in_flight < 0 || (in_flight > 1 && micro_batches <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro_batches_in_flight ", in_flight,
        in_flight < 0 ? " is below 0" : " needs more than one micro-batch (micro_batches)"));
  }
  if (micro_batches <= 1) return absl::OkStatus();
  const bool even = global_batch % micro_batches == 0;
  if (!even && smaller == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeMicroBatches(global_batch, micro_batches),
                     " need the program lowered at the smaller micro-batches' rows too"));
  }
  Unroller u(index, global_batch, micro_batches);
  return u.Run(program, even ? nullptr : smaller);
}

}  // namespace quilt
