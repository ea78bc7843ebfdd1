// Tensor lifetimes within a step, as the simulator's memory model has them
// (src/sim/simulator.h: instances freed after their last reader, updates
// in place): each device frees a tensor once the last of its instructions
// that read it has finished, and commits an update's new values over the
// old once every instruction there that reads or writes either has
// finished, instead of holding every tensor of the step, and both values,
// until the next step. (A failed step ends the run and nothing of it is
// written out, so an update committed before the failure is never seen.)
#include <algorithm>

#include "src/planner/micro_batch_rows.h"
#include "src/runtime/executor_impl.h"

namespace quilt {
using quilt::v1::Instruction;

namespace {
constexpr int kMicroBatchBits = 20;  // micro-batches per step < 2^20 (checked)
int64_t FreeKey(int tensor, int micro_batch) {
  return (static_cast<int64_t>(tensor) << kMicroBatchBits) | micro_batch;
}
}  // namespace

std::vector<std::string> TensorsNamed(const Instruction& ins, const Graph& g,
                                      const absl::flat_hash_map<std::string, int>& op_ids,
                                      bool writes) {
  std::vector<std::string> out;
  switch (ins.kind_case()) {
    case Instruction::kCompute: {
      auto op = op_ids.find(ins.compute().op());
      if (op == op_ids.end()) break;
      for (const std::string& in : g.ops[op->second].inputs) {
        if (!in.empty()) out.push_back(in);
      }
      if (writes) {
        out.insert(out.end(), g.ops[op->second].outputs.begin(), g.ops[op->second].outputs.end());
      }
      break;
    }
    case Instruction::kSend:
      out.push_back(ins.send().range().tensor());
      break;
    case Instruction::kRecv:
      if (writes) {
        out.push_back(ins.recv().has_into() ? ins.recv().into().tensor()
                                            : ins.recv().range().tensor());
      }
      break;
    case Instruction::kSplit:
      out.push_back(ins.split().source().tensor());
      break;
    case Instruction::kConcat:
      for (const auto& part : ins.concat().parts()) out.push_back(part.tensor());
      if (writes) out.push_back(ins.concat().target().tensor());
      break;
    case Instruction::kAllReduce:
      out.insert(out.end(), ins.all_reduce().tensors().begin(), ins.all_reduce().tensors().end());
      break;
    case Instruction::kPsPush:
      out.push_back(ins.ps_push().gradient().tensor());
      break;
    case Instruction::kPsAccumulate:
      out.push_back(ins.ps_accumulate().gradient().tensor());
      break;
    case Instruction::kPsPull:
      if (writes) out.push_back(ins.ps_pull().parameter().tensor());
      break;
    default:
      break;
  }
  return out;
}

void Executor::Impl::PlanFrees() {
  // Per device, tensors read outside instructions: after the step (the
  // loss; an update's source and target where the update runs) and by the
  // pulls it serves. `kept` holds them whole (the frees by tensor);
  // `all_of` those whose every instance stays (the frees by instance: a
  // target's or a served parameter's persistent instances stay in any
  // case). Elsewhere, and beside those, a parameter's copy (pulled whole
  // where a shard is served) goes after its last reader, as the simulator
  // has it.
  std::vector<absl::flat_hash_set<int>> kept(devices_.size()), all_of(devices_.size());
  absl::flat_hash_map<int, int> target_of;  // update source → target
  for (const auto& [src, dst] : update_ids_) target_of[src] = dst;
  for (size_t d = 0; d < devices_.size() && loss_tensor_ >= 0; ++d) {
    kept[d].insert(loss_tensor_);
    all_of[d].insert(loss_tensor_);
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const int d = nodes_[n].device;
    for (const std::string& name : TensorsNamed(*nodes_[n].ins, graph_, op_ids_, true)) {
      auto u = target_of.find(tensor_ids_.at(name));
      if (u == target_of.end()) continue;
      kept[d].insert({u->first, u->second});
      all_of[d].insert(u->first);
    }
  }
  std::vector<absl::flat_hash_set<int>> resident(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (const auto& [key, unused] : devices_[d]->persistent) resident[d].insert(key.tensor);
  }
  served_.clear();
  for (const auto& dp : program_.devices()) {
    for (const Instruction& ins : dp.instructions()) {
      if (!ins.has_ps_pull()) continue;
      const int t = tensor_ids_.at(ins.ps_pull().parameter().tensor());
      served_.insert(t);
      auto server = program_device_.find(ins.ps_pull().server_device());
      for (size_t d = 0; server != program_device_.end() && d < devices_.size(); ++d) {
        if (devices_[d]->topo_index != server->second) continue;
        kept[d].insert(t);
        if (!resident[d].contains(t)) all_of[d].insert(t);
      }
    }
  }
  absl::flat_hash_set<int> sources;
  for (const auto& [src, dst] : update_ids_) sources.insert(src);
  // Updates by the tensors they name (those chained to another, committed
  // at the step's end, left out).
  absl::flat_hash_map<int, std::vector<int>> updates_of;
  for (size_t u = 0; u < update_ids_.size(); ++u) {
    const auto [src, dst] = update_ids_[u];
    if (sources.contains(dst)) continue;
    updates_of[src].push_back(static_cast<int>(u));
    updates_of[dst].push_back(static_cast<int>(u));
  }
  PlanInstanceFrees(all_of);
  update_of_source_.clear();
  for (size_t u = 0; u < update_ids_.size(); ++u) {
    if (!sources.contains(update_ids_[u].second)) {
      update_of_source_[update_ids_[u].first] = static_cast<int>(u);
    }
  }
  readers_.assign(devices_.size(), {});
  commit_waits_.assign(devices_.size(), {});
  frees_.assign(nodes_.size(), {});
  commits_.assign(nodes_.size(), {});
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const int d = nodes_[n].device;
    // (Every name is known: CheckInstructions.)
    std::vector<int> reads, named;
    for (const std::string& name : TensorsNamed(*nodes_[n].ins, graph_, op_ids_, false)) {
      reads.push_back(tensor_ids_.at(name));
    }
    for (const std::string& name : TensorsNamed(*nodes_[n].ins, graph_, op_ids_, true)) {
      named.push_back(tensor_ids_.at(name));
    }
    for (std::vector<int>* v : {&reads, &named}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    // (A batch tensor's rows read in one micro-batch are that one's.)
    const int micro = nodes_[n].ins->micro_batch();
    for (int t : reads) {
      if (kept[d].contains(t) || resident[d].contains(t)) continue;
      const int64_t key = FreeKey(t, graph_.tensors()[t].shape.HasBatch() ? micro : 0);
      frees_[n].push_back(key);
      ++readers_[d][key];
    }
    std::vector<int> waits;
    for (int t : named) {
      auto it = updates_of.find(t);
      if (it == updates_of.end()) continue;
      for (int u : it->second) {
        if (resident[d].contains(update_ids_[u].second)) waits.push_back(u);
      }
    }
    std::sort(waits.begin(), waits.end());
    waits.erase(std::unique(waits.begin(), waits.end()), waits.end());
    for (int u : waits) {
      commits_[n].push_back(u);
      ++commit_waits_[d][u];
    }
  }
}

void Executor::Impl::InPlaceOutputs(int node, const Op& op,
                                    const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                    const std::vector<Tensor>& holds, std::vector<Tensor>* outs) {
  if (options_.timing_only) return;  // nothing applied: the parameters stay as they began
  const int d = nodes_[node].device;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    const int src = tensor_ids_.at(op.outputs[i]);
    auto u = update_of_source_.find(src);
    if (u == update_of_source_.end()) continue;
    const int dst = update_ids_[u->second].second;
    auto left = commit_left_[d].find(u->second);
    // (This node is one of those the commit waits for.)
    if (served_.contains(dst) || left == commit_left_[d].end() || left->second != 1) continue;
    Tensor old;
    if (!devices_[d]->store.Get(InstanceKey{dst, ranges[i].first, ranges[i].second}, &old) ||
        old.dtype() != graph_.tensors()[src].dtype ||
        old.dims() != DimsOf(src, ranges[i].first, ranges[i].second)) {
      continue;
    }
    // Its users: the store's instance, `old` and the update's own inputs.
    long users = 2;
    for (const Tensor& h : holds) users += h.SharesStorage(old) ? 1 : 0;
    if (old.storage_users() == users) (*outs)[i] = old;
  }
}

std::vector<Tensor> Executor::Impl::Release(int node) {
  std::vector<Tensor> dropped;
  const int d = nodes_[node].device;
  TensorStore& store = devices_[d]->store;
  auto& left = readers_left_[d];
  for (int64_t key : frees_[node]) {
    auto it = left.find(key);
    if (it == left.end() || --it->second != 0) continue;
    const int t = static_cast<int>(key >> kMicroBatchBits);
    const int64_t micro = key & ((int64_t{1} << kMicroBatchBits) - 1);
    std::vector<Tensor> freed;
    if (micro == 0) {
      freed = store.Erase(t);
    } else {
      const MicroBatchSpan rows =
          MicroBatchRange(batch_, micro_batches_, static_cast<int>(micro) - 1);
      freed = store.EraseRows(t, rows.begin, rows.end);
    }
    for (Tensor& v : freed) dropped.push_back(std::move(v));
  }
  for (int i : instance_frees_[node]) {
    if (--instance_left_[i] != 0) continue;
    for (Tensor& v : store.EraseInstance(instance_keys_[i])) dropped.push_back(std::move(v));
  }
  auto& commits = commit_left_[d];
  for (int u : commits_[node]) {
    auto it = commits.find(u);
    if (it == commits.end() || --it->second != 0 || options_.timing_only) continue;
    const auto [src, dst] = update_ids_[u];
    for (const auto& [key, value] : store.Instances(src)) {
      store.Put(InstanceKey{dst, key.begin, key.end}, value);
    }
    for (Tensor& v : store.Erase(src)) dropped.push_back(std::move(v));
  }
  return dropped;
}

}  // namespace quilt
