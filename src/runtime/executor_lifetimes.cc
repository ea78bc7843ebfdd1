// Tensor lifetimes within a step: each device frees a tensor once the last
// of its instructions that read it has finished, as the simulator's memory
// model has it (src/sim/simulator.h: instances freed after their last
// reader), instead of holding every tensor of the step until the next one.
#include <algorithm>

#include "src/runtime/executor_impl.h"

namespace quilt {

void Executor::Impl::PlanFrees() {
  using quilt::v1::Instruction;
  // Tensors read outside instructions: after the step (the loss, the
  // updates' sources and targets) and by the pulls this process serves.
  absl::flat_hash_set<int> kept;
  if (loss_tensor_ >= 0) kept.insert(loss_tensor_);
  for (const auto& [src, dst] : update_ids_) {
    kept.insert(src);
    kept.insert(dst);
  }
  for (const auto& dp : program_.devices()) {
    for (const Instruction& ins : dp.instructions()) {
      if (ins.has_ps_pull()) kept.insert(tensor_ids_.at(ins.ps_pull().parameter().tensor()));
    }
  }
  std::vector<absl::flat_hash_set<int>> resident(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (const auto& [key, unused] : devices_[d]->persistent) resident[d].insert(key.tensor);
  }
  readers_.assign(devices_.size(), {});
  frees_.assign(nodes_.size(), {});
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Instruction& ins = *nodes_[n].ins;
    std::vector<int> reads;
    auto read = [&](const std::string& name) { reads.push_back(tensor_ids_.at(name)); };
    switch (ins.kind_case()) {
      case Instruction::kCompute:
        for (const std::string& in : graph_.ops[op_ids_.at(ins.compute().op())].inputs) {
          if (!in.empty()) read(in);
        }
        break;
      case Instruction::kSend:
        read(ins.send().range().tensor());
        break;
      case Instruction::kSplit:
        read(ins.split().source().tensor());
        break;
      case Instruction::kConcat:
        for (const auto& part : ins.concat().parts()) read(part.tensor());
        break;
      case Instruction::kAllReduce:
        for (const std::string& t : ins.all_reduce().tensors()) read(t);
        break;
      case Instruction::kPsPush:
        read(ins.ps_push().gradient().tensor());
        break;
      case Instruction::kPsAccumulate:
        read(ins.ps_accumulate().gradient().tensor());
        break;
      default:
        break;  // receives and pulls only write
    }
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
    const int d = nodes_[n].device;
    for (int t : reads) {
      if (kept.contains(t) || resident[d].contains(t)) continue;
      frees_[n].push_back(t);
      ++readers_[d][t];
    }
  }
}

std::vector<int> Executor::Impl::Freed(int node) {
  std::vector<int> out;
  auto& left = readers_left_[nodes_[node].device];
  for (int t : frees_[node]) {
    auto it = left.find(t);
    if (it != left.end() && --it->second == 0) out.push_back(t);
  }
  return out;
}

}  // namespace quilt
