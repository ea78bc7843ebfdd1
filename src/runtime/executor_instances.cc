// Which instance of a tensor each instruction reads, and when each
// instance can go, as the simulator's memory model has them
// (src/sim/sim_build.cc, Sim::Containing): a read finds the exact
// instance; else, of those that hold its rows, the one created latest by
// the program's order that is fed, resident or written by an instruction
// it depends on, else the one created latest. Where that instance is
// there for sure when the reader runs (fed, resident, or written by a
// dependency), the executor reads it (Read with the node); else the read
// takes what the store has then (TensorStore::FindContaining) and counts
// as a reader of every instance that may hold its rows. Each instance is
// dropped once its last reader and writer have finished, not with every
// instance of its tensor after the tensor's last reader: a part copied
// into the whole goes after the copy. (The simulator reads a push's and an
// accumulate's local gradient whole where the executor reads its range,
// and has no counterpart of the unsure reads' counting.)
#include <algorithm>

#include "src/runtime/executor_impl.h"

namespace quilt {
using quilt::v1::Instruction;

std::vector<InstanceKey> InstancesNamed(const Instruction& ins, const Graph& g,
                                        const absl::flat_hash_map<std::string, int>& ids,
                                        const absl::flat_hash_map<std::string, int>& op_ids,
                                        const std::vector<bool>& is_update, bool writes) {
  std::vector<InstanceKey> out;
  auto add = [&](const std::string& name, int64_t begin, int64_t end) {
    out.push_back(InstanceKey{ids.at(name), begin, end});
  };
  auto range = [&](const quilt::v1::TensorRange& r) { add(r.tensor(), r.begin(), r.end()); };
  switch (ins.kind_case()) {
    case Instruction::kCompute: {
      const int op = op_ids.at(ins.compute().op());
      const int64_t b = ins.compute().begin(), e = ins.compute().end();
      const bool shard = is_update[op] && !(b == 0 && e == 0);
      auto ranged = [&](const std::string& name) {
        return g.tensors()[ids.at(name)].shape.HasBatch() || shard;
      };
      for (const std::string& name : writes ? g.ops[op].outputs : g.ops[op].inputs) {
        if (!name.empty()) add(name, ranged(name) ? b : 0, ranged(name) ? e : 0);
      }
      // A sum over micro-batches reads its whole outputs' earlier values.
      if (!writes && ins.compute().accumulate()) {
        for (const std::string& name : g.ops[op].outputs) {
          if (!ranged(name)) add(name, 0, 0);
        }
      }
      break;
    }
    case Instruction::kSend:
      if (!writes) range(ins.send().range());
      break;
    case Instruction::kRecv:  // into the rows of `into` (whole without it)
      if (writes)
        add(ins.recv().range().tensor(), ins.recv().into().begin(), ins.recv().into().end());
      break;
    case Instruction::kConcat:  // parts read from the target's tensor
      if (writes) {
        range(ins.concat().target());
      } else {
        for (const auto& part : ins.concat().parts()) {
          add(ins.concat().target().tensor(), part.begin(), part.end());
        }
      }
      break;
    case Instruction::kAllReduce:
      for (const std::string& name : ins.all_reduce().tensors()) add(name, 0, 0);
      break;
    case Instruction::kPsPush:
      if (!writes) range(ins.ps_push().gradient());
      break;
    case Instruction::kPsAccumulate:
      if (writes || ins.ps_accumulate().includes_local()) range(ins.ps_accumulate().gradient());
      break;
    case Instruction::kPsPull:
      if (writes) add(ins.ps_pull().parameter().tensor(), 0, 0);
      break;
    default:
      break;
  }
  return out;
}

namespace {

// Whether a read of `r` may find its rows in instance `x` at run time
// (TensorStore::FindContaining's rule).
bool MayRead(const InstanceKey& r, const InstanceKey& x) {
  return x.tensor == r.tensor && InstanceHolds(x, r.begin, r.end);
}

// The instances of one tensor on one device so far, in the program's
// order, each with the id of its last writer (-1: persistent or fed).
struct Chain {
  std::vector<std::pair<InstanceKey, int64_t>> items;

  void Write(const InstanceKey& k, int64_t writer) {
    for (auto& [key, w] : items) {
      if (key == k) {
        w = writer;
        return;
      }
    }
    items.push_back({k, writer});
  }
  // The instance a read of `r` by an instruction with `deps` finds, and
  // whether it is there for sure when that instruction runs (resident, fed
  // or written by a dependency); nullptr: none. "Latest": created latest
  // (a key written again keeps its place).
  const std::pair<InstanceKey, int64_t>* Find(const InstanceKey& r,
                                              const google::protobuf::RepeatedField<int64_t>& deps,
                                              bool* sure) const {
    const std::pair<InstanceKey, int64_t>* latest = nullptr;
    const std::pair<InstanceKey, int64_t>* from_dep = nullptr;
    auto certain = [&](int64_t w) {
      return w < 0 || std::find(deps.begin(), deps.end(), w) != deps.end();
    };
    for (auto it = items.rbegin(); it != items.rend(); ++it) {
      if (it->first == r) {
        *sure = certain(it->second);
        return &*it;
      }
      if (!MayRead(r, it->first)) continue;
      if (latest == nullptr) latest = &*it;
      if (from_dep == nullptr && certain(it->second)) from_dep = &*it;
    }
    const auto* found = from_dep != nullptr ? from_dep : latest;
    *sure = found != nullptr && certain(found->second);
    return found;
  }
};

}  // namespace

void Executor::Impl::PlanInstanceFrees(const std::vector<absl::flat_hash_set<int>>& kept) {
  std::vector<absl::flat_hash_map<int, Chain>> chains(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (const auto& [key, unused] : devices_[d]->persistent) chains[d][key.tensor].Write(key, -1);
    for (const auto& r : devices_[d]->feeds) {
      chains[d][tensor_ids_.at(r.tensor())].Write(
          InstanceKey{tensor_ids_.at(r.tensor()), r.begin(), r.end()}, -1);
    }
  }
  // Per device: the nodes each instance waits for, its readers and its
  // writers (one that ran after the last reader would make it again, to be
  // held until the step's end).
  std::vector<absl::flat_hash_map<InstanceKey, std::vector<int>>> waits(devices_.size());
  // Reads that may find another instance than theirs, or find one the
  // program writes only later in its order: (node, read).
  std::vector<std::pair<int, InstanceKey>> unsure;
  reads_from_.assign(nodes_.size(), {});
  // (Nodes are in each device's program order.)
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const int d = nodes_[n].device;
    const Instruction& ins = *nodes_[n].ins;
    for (const InstanceKey& r :
         InstancesNamed(ins, graph_, tensor_ids_, op_ids_, is_update_, false)) {
      bool sure = false;
      const auto* found = chains[d][r.tensor].Find(r, ins.deps(), &sure);
      if (found == nullptr || !sure) {  // none yet by the program's order, or maybe not yet
        unsure.push_back({static_cast<int>(n), r});
        continue;
      }
      reads_from_[n].push_back({r, found->first});
      waits[d][found->first].push_back(static_cast<int>(n));
    }
    for (const InstanceKey& w :
         InstancesNamed(ins, graph_, tensor_ids_, op_ids_, is_update_, true)) {
      chains[d][w.tensor].Write(w, ins.id());
      waits[d][w].push_back(static_cast<int>(n));
    }
  }
  for (const auto& [n, r] : unsure) {
    const int d = nodes_[n].device;
    for (const auto& [x, unused] : chains[d][r.tensor].items) {
      if (MayRead(r, x)) waits[d][x].push_back(n);
    }
  }
  instance_frees_.assign(nodes_.size(), {});
  instance_keys_.clear();
  instance_waits_.clear();
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (auto& [x, nodes] : waits[d]) {
      if (kept[d].contains(x.tensor) || devices_[d]->persistent.contains(x)) continue;
      std::sort(nodes.begin(), nodes.end());
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      const int index = static_cast<int>(instance_keys_.size());
      instance_keys_.push_back(x);
      instance_waits_.push_back(static_cast<int>(nodes.size()));
      for (int n : nodes) instance_frees_[n].push_back(index);
    }
  }
}

}  // namespace quilt
