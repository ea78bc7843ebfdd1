// The validator's dataflow check: instructions in id order, every read
// satisfied by a resident instance or a dependency's write, and partial
// sums read only as their ops allow and summed exactly once.
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/graph/op_registry.h"
#include "src/planner/partial_sums.h"
#include "src/planner/validator_state.h"

namespace quilt::validator_internal {

absl::Status Validator::AddSummed(const quilt::v1::AllReduceInstr& ar,
                                  std::vector<Access>* out) const {
  for (const auto& name : ar.tensors()) {
    ASSIGN_OR_RETURN(int t, Tensor(name));
    out->push_back({t, {ar.begin(), ar.end()}});
  }
  return absl::OkStatus();
}

absl::Status Validator::WritesOf(int n, std::vector<Access>* out) const {
  const Instruction& ins = *nodes_[n].ins;
  switch (ins.kind_case()) {
    case Instruction::kCompute: {
      const int op = ix_.OpIndex(ins.compute().op(), ins.compute().op_index());
      const Range own{ins.compute().begin(), ins.compute().end()};
      if (ix_.Schema(op).is_update) {
        // In place: parameter and optimizer state (not re-read this step).
        return absl::OkStatus();
      }
      for (int t : ix_.Outputs(op)) out->push_back({t, Batched(t) ? own : Range{}});
      return absl::OkStatus();
    }
    case Instruction::kRecv:
      return AddRange(ins.recv().into(), out);
    case Instruction::kConcat:
      return AddRange(ins.concat().target(), out);
    case Instruction::kAllReduce:
      return AddSummed(ins.all_reduce(), out);
    case Instruction::kPsAccumulate:
      return AddRange(ins.ps_accumulate().gradient(), out);
    case Instruction::kPsPull: {
      ASSIGN_OR_RETURN(int t, Tensor(ins.ps_pull().parameter().tensor(),
                                     ins.ps_pull().parameter().tensor_index()));
      out->push_back({t, {}});
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

absl::Status Validator::ReadsOf(int n, std::vector<Access>* out) const {
  const Instruction& ins = *nodes_[n].ins;
  switch (ins.kind_case()) {
    case Instruction::kCompute: {
      const int op = ix_.OpIndex(ins.compute().op(), ins.compute().op_index());
      const Range own{ins.compute().begin(), ins.compute().end()};
      const bool shard = ix_.Schema(op).is_update && !own.whole();
      for (int t : ix_.Inputs(op)) {
        if (t >= 0) out->push_back({t, Batched(t) || shard ? own : Range{}});
      }
      return absl::OkStatus();
    }
    case Instruction::kSend:
      return AddRange(ins.send().range(), out);
    case Instruction::kConcat:
      for (const auto& part : ins.concat().parts()) RETURN_IF_ERROR(AddRange(part, out));
      return absl::OkStatus();
    case Instruction::kAllReduce:
      return AddSummed(ins.all_reduce(), out);
    case Instruction::kPsPush: {
      ASSIGN_OR_RETURN(int t, Tensor(ins.ps_push().gradient().tensor(),
                                     ins.ps_push().gradient().tensor_index()));
      out->push_back({t, {}});
      return absl::OkStatus();
    }
    case Instruction::kPsAccumulate:
      if (ins.ps_accumulate().includes_local()) {
        ASSIGN_OR_RETURN(int t, Tensor(ins.ps_accumulate().gradient().tensor(),
                                       ins.ps_accumulate().gradient().tensor_index()));
        out->push_back({t, {}});
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

int Validator::Writer(int n, int tensor, const Range& need) const {
  const int d = nodes_[n].device;
  int best = -2;
  for (int dep : deps_[n]) {
    if (nodes_[dep].device != d || dep <= best) continue;
    const Node& w = nodes_[dep];
    for (int k = w.first_write; k < w.first_write + w.num_writes; ++k) {
      if (writes_[k].tensor == tensor && Covers(writes_[k].range, need)) best = dep;
    }
  }
  if (best >= 0) return best;
  auto it = resident_.find(Key(tensor, d));
  if (it != resident_.end()) {
    for (const Range& r : it->second) {
      if (Covers(r, need)) return -1;
    }
  }
  return -2;
}

std::pair<int64_t, int64_t> Validator::Rows(int tensor, const Range& r) const {
  if (!r.whole()) return {r.begin, r.end};
  const Shape& s = g_.tensors()[tensor].shape;
  if (Batched(tensor)) return {0, p_.global_batch()};
  return {0, s.rank() == 0 ? 1 : s.dim(0).value};
}

std::vector<int> Validator::Contributors(int n, int tensor, const Range& need) const {
  const int w = Writer(n, tensor, need);
  // Slices summed in place after the writer, latest first: each supplies
  // the rows of `need` that no later one did.
  const int d = nodes_[n].device;
  std::vector<int> slices;
  for (int dep : deps_[n]) {
    const Node& s = nodes_[dep];
    if (s.device != d || dep <= w || !s.ins->has_all_reduce()) continue;
    const auto& ar = s.ins->all_reduce();
    if (ar.end() == 0 || ar.tensors_size() != 1 || ix_.Tensor(ar.tensors(0)) != tensor) {
      continue;
    }
    slices.push_back(dep);
  }
  std::sort(slices.rbegin(), slices.rend());
  auto [lo, hi] = Rows(tensor, need);
  std::vector<std::pair<int64_t, int64_t>> open = {{lo, hi}};  // rows not yet supplied
  std::vector<int> out;
  for (int s : slices) {
    const auto& ar = nodes_[s].ins->all_reduce();
    std::vector<std::pair<int64_t, int64_t>> rest;
    bool used = false;
    for (auto [a, b] : open) {
      const int64_t x = std::max(a, ar.begin()), y = std::min(b, ar.end());
      if (x >= y) {
        rest.push_back({a, b});
        continue;
      }
      used = true;
      if (a < x) rest.push_back({a, x});
      if (y < b) rest.push_back({y, b});
    }
    if (used) out.push_back(s);
    open = std::move(rest);
  }
  if (open.empty()) return out;
  if (w == -2) return {};
  out.push_back(w);
  return out;
}

absl::Status Validator::CheckDataflow() {
  // Nodes are in id order, and dependencies point to smaller ids: one pass
  // sees every writer before its readers. A write is a partial sum when a
  // replica computed a non-batch output from its slice of the batch (or
  // from a partial input); partial sums must be summed exactly once (by an
  // all-reduce over every device holding one, or by pushes to one
  // accumulation on the server) before anything but a linear op reads them.
  const int64_t batch = p_.global_batch();
  // Gradient tensor → devices holding a partial sum of it.
  absl::flat_hash_map<int, std::set<int>> partial_on;
  // (op, tensor) → devices where the op reads partial sums of the tensor;
  // Key(tensor, device) → the nodes that read its partial sum as is.
  std::map<std::pair<int, int>, std::set<int>> partial_readers;
  absl::flat_hash_map<int64_t, std::vector<int>> partial_reads_at;
  // Key(op, device) → the batch rows the op's last run there summed.
  absl::flat_hash_map<int64_t, Range> summed_rows;
  std::vector<Access> reads, writes;
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const int n = static_cast<int>(ni);
    Node& node = nodes_[n];
    const Instruction& ins = *node.ins;
    reads.clear();
    RETURN_IF_ERROR(ReadsOf(n, &reads));
    // Per read: whether any / all of the rows it reads are partial sums.
    std::vector<bool> read_partial, read_all_partial;
    for (const Access& a : reads) {
      const std::vector<int> ws = Contributors(n, a.tensor, a.range);
      if (ws.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "instruction ", ins.id(), " on ", DeviceName(node.device), " reads '",
            TensorName(a.tensor), "'",
            a.range.whole() ? "" : absl::StrCat(" rows [", a.range.begin, ", ", a.range.end, ")"),
            ", which is neither resident there nor written by one of its dependencies"));
      }
      bool any = false, all = true;
      for (int w : ws) {
        bool partial = false;
        if (w >= 0) {
          for (int k = nodes_[w].first_write; k < nodes_[w].first_write + nodes_[w].num_writes;
               ++k) {
            if (writes_[k].tensor == a.tensor) partial = partial || write_partial_[k];
          }
        }
        any |= partial;
        all &= partial;
      }
      if (any && !all && !ins.has_all_reduce()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "instruction ", ins.id(), " on ", DeviceName(node.device), " reads '",
            TensorName(a.tensor), "' with some rows summed and others still partial sums"));
      }
      read_partial.push_back(any);
      read_all_partial.push_back(all);
    }
    bool out_partial = false;
    switch (ins.kind_case()) {
      case Instruction::kCompute: {
        const int op = ix_.OpIndex(ins.compute().op(), ins.compute().op_index());
        const Range own{ins.compute().begin(), ins.compute().end()};
        const OpSchema& s = ix_.Schema(op);
        int partial_inputs = 0;
        bool batched_input = false;
        for (size_t k = 0; k < reads.size(); ++k) {
          partial_inputs += read_partial[k];
          batched_input |= Batched(reads[k].tensor);
        }
        if (partial_inputs > 0 && s.is_update) {
          const int grad = reads.size() > 1 ? reads[1].tensor : reads[0].tensor;
          return absl::InvalidArgumentError(
              absl::StrCat("the update '", g_.ops[op].name, "' on ", DeviceName(node.device),
                           " reads gradient '", TensorName(grad),
                           "', a partial sum over part of the batch that was never aggregated"));
        }
        const PartialRule rule = PartialRuleOf(g_.ops[op], s);
        bool allowed = rule != PartialRule::kNone;
        if (rule == PartialRule::kOneOperand) allowed = partial_inputs <= 1;
        for (size_t k = 1; k < reads.size() && rule == PartialRule::kFirstOperand; ++k) {
          allowed &= !(read_partial[k] && reads[k].tensor != reads[0].tensor);
        }
        const bool adds = rule == PartialRule::kAllOperands;
        if (partial_inputs > 0 && !allowed) {
          return absl::InvalidArgumentError(
              absl::StrCat("op '", g_.ops[op].name, "' on ", DeviceName(node.device),
                           " reads a partial sum that was never aggregated"));
        }
        if (partial_inputs > 0) {
          for (int t : ix_.Outputs(op)) {
            if (Batched(t)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "op '", g_.ops[op].name, "' on ", DeviceName(node.device),
                  " reads a partial sum into rows of the batch tensor '", TensorName(t), "'"));
            }
          }
          for (size_t k = 0; k < reads.size(); ++k) {
            if (read_partial[k]) {
              partial_readers[{op, reads[k].tensor}].insert(node.device);
              partial_reads_at[Key(reads[k].tensor, node.device)].push_back(n);
            }
            // Adding (or concatenating) a whole operand to partial sums
            // counts it once per device.
            if (adds && !read_partial[k] && op_runs_[op].size() > 1) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "op '", g_.ops[op].name, "' on ", DeviceName(node.device), " adds '",
                  TensorName(reads[k].tensor), "', whole, to partial sums on ", op_runs_[op].size(),
                  " devices: it would be counted once per device"));
            }
          }
        }
        // The rows its outputs without batch rows sum: its own, and where
        // it adds to them (gradient accumulation), those the writes before
        // it on this device summed, when they join up.
        Range rows = own;
        if (ins.compute().accumulate()) {
          auto prev = summed_rows.find(Key(op, node.device));
          rows = prev != summed_rows.end() && prev->second.end == own.begin && !own.whole()
                     ? Range{prev->second.begin, own.end}
                     : Range{-1, -1};
        }
        if (batched_input) summed_rows[Key(op, node.device)] = rows;
        out_partial =
            partial_inputs > 0 || (batched_input && !(rows.begin == 0 && rows.end == batch));
        break;
      }
      case Instruction::kSend:
        if (read_partial[0]) {
          return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " sends '",
                                                         TensorName(reads[0].tensor),
                                                         "', a partial sum; aggregate it instead"));
        }
        break;
      case Instruction::kConcat:
        for (bool p : read_partial) out_partial |= p;
        break;
      case Instruction::kAllReduce:
      case Instruction::kPsPush:
      case Instruction::kPsAccumulate:
        for (size_t k = 0; k < reads.size() && ins.has_all_reduce(); ++k) {
          // The sum takes the partial sum's place: whatever reads the
          // partial as is must have run.
          auto readers = partial_reads_at.find(Key(reads[k].tensor, node.device));
          if (readers == partial_reads_at.end()) continue;
          for (int a : readers->second) {
            if (!DependsOn(n, a)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "all-reduce ", ins.id(), " on ", DeviceName(node.device), " replaces '",
                  TensorName(reads[k].tensor), "', whose partial sum instruction ",
                  nodes_[a].ins->id(), " reads as is, without waiting for it"));
            }
          }
          partial_reads_at.erase(readers);
        }
        for (size_t k = 0; k < reads.size(); ++k) {
          const bool alone =
              ins.has_all_reduce() && groups_.at(ins.all_reduce().group()).size() == 1;
          if (!read_all_partial[k] && !alone) {
            return absl::InvalidArgumentError(
                absl::StrCat("instruction ", ins.id(), " on ", DeviceName(node.device), " sums '",
                             TensorName(reads[k].tensor),
                             "' again, which is already complete there (a gradient must be "
                             "aggregated exactly once)"));
          }
        }
        break;
      default:
        break;
    }
    writes.clear();
    RETURN_IF_ERROR(WritesOf(n, &writes));
    node.first_write = static_cast<int>(writes_.size());
    node.num_writes = static_cast<int>(writes.size());
    const bool is_compute = ins.has_compute();
    for (const Access& w : writes) {
      bool partial = out_partial && !Batched(w.tensor);
      if (is_compute && partial) {
        // Per-replica statistics (e.g. batch-norm moments) are not sums.
        const int op = ix_.OpIndex(ins.compute().op(), ins.compute().op_index());
        for (size_t k = 0; k < ix_.Outputs(op).size(); ++k) {
          if (ix_.Outputs(op)[k] == w.tensor &&
              IsLocalOutput(g_.ops[op], ix_.Schema(op), static_cast<int>(k))) {
            partial = false;
          }
        }
      }
      if (partial) partial_on[w.tensor].insert(node.device);
      writes_.push_back(w);
      write_partial_.push_back(partial);
    }
  }
  // Each aggregation sums the partial sums of every device holding one.
  auto names = [&](const std::set<int>& ds) {
    std::vector<std::string> out;
    for (int d : ds) out.push_back(DeviceName(d));
    return absl::StrJoin(out, ", ");
  };
  for (const auto& [cid, members] : collective_) {
    const auto& ar = nodes_[members.front()].ins->all_reduce();
    const std::vector<int>& group = groups_.at(ar.group());
    const std::set<int> summed(group.begin(), group.end());
    for (const std::string& name : ar.tensors()) {
      const int t = ix_.Tensor(name);
      if (summed != partial_on[t]) {
        return absl::InvalidArgumentError(
            absl::StrCat("all-reduce ", cid, " sums '", name, "' over {", names(summed),
                         "}, but its partial sums are on {", names(partial_on[t]), "}"));
      }
    }
  }
  // A linear op reading partial sums must read every device's: its own
  // partial outputs are summed later, the parts it does not read never.
  for (const auto& [key, readers] : partial_readers) {
    const std::set<int>& holders = partial_on[key.second];
    if (readers != holders) {
      return absl::InvalidArgumentError(
          absl::StrCat("op '", g_.ops[key.first].name, "' reads the partial sums of '",
                       TensorName(key.second), "' on {", names(readers), "}, but they are on {",
                       names(holders), "}: the others would never be added"));
    }
  }
  for (const Node& node : nodes_) {
    if (!node.ins->has_ps_accumulate()) continue;
    const auto& acc = node.ins->ps_accumulate();
    std::set<int> summed;
    if (acc.includes_local()) summed.insert(node.device);
    for (int64_t tag : acc.push_tags()) summed.insert(nodes_[push_.at(tag)].device);
    const int t = ix_.Tensor(acc.gradient().tensor(), acc.gradient().tensor_index());
    if (summed != partial_on[t]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the accumulation of '", acc.gradient().tensor(), "' on ",
                       DeviceName(node.device), " sums the partial sums of {", names(summed),
                       "}, but they are on {", names(partial_on[t]), "}"));
    }
  }
  return absl::OkStatus();
}

bool Validator::DependsOn(int n, int a) const {
  // Dependencies point to smaller indices: nodes below `a` cannot lead to it.
  std::vector<int> stack = {n};
  std::vector<bool> seen(static_cast<size_t>(n - a + 1), false);
  while (!stack.empty()) {
    const int x = stack.back();
    stack.pop_back();
    for (int d : deps_[x]) {
      if (d == a) return true;
      if (d < a || seen[d - a]) continue;
      seen[d - a] = true;
      stack.push_back(d);
    }
  }
  return false;
}

}  // namespace quilt::validator_internal
