#include "src/planner/priorities.h"

#include <algorithm>
#include <map>

namespace quilt {

double EstimateInstruction(const quilt::v1::Instruction& ins, int device, const Topology& topo,
                           const CostModel* cost, const std::map<std::string, int>& op_index) {
  if (cost == nullptr) return 1.0;
  switch (ins.kind_case()) {
    case quilt::v1::Instruction::kCompute: {
      auto it = op_index.find(ins.compute().op());
      if (it == op_index.end()) return 0;
      return cost->OpTime(it->second, device, ins.compute().end() - ins.compute().begin());
    }
    case quilt::v1::Instruction::kSend: {
      const int peer = topo.DeviceIndex(ins.send().peer_device());
      return peer < 0 ? 0 : topo.PathBetween(device, peer).Time(static_cast<double>(ins.send().bytes()));
    }
    case quilt::v1::Instruction::kPsPush: {
      const int peer = topo.DeviceIndex(ins.ps_push().server_device());
      return peer < 0 ? 0 : topo.PathBetween(device, peer).Time(static_cast<double>(ins.ps_push().bytes()));
    }
    case quilt::v1::Instruction::kPsPull: {
      const int peer = topo.DeviceIndex(ins.ps_pull().server_device());
      return peer < 0 ? 0 : topo.PathBetween(peer, device).Time(static_cast<double>(ins.ps_pull().bytes()));
    }
    case quilt::v1::Instruction::kAllReduce: {
      std::vector<int> members;
      for (const auto& d : ins.all_reduce().devices()) members.push_back(topo.DeviceIndex(d));
      return cost->AllReduce(ins.all_reduce().algorithm(), members,
                             static_cast<double>(ins.all_reduce().bytes()))
          .time_s;
    }
    default:
      return 0;
  }
}

std::vector<double> HeftPriorities(const std::vector<std::pair<int, quilt::v1::Instruction>>& instrs,
                                   const Topology& topo, const Graph& g, const CostModel* cost) {
  const size_t n = instrs.size();
  std::map<std::string, int> op_index;
  for (size_t i = 0; i < g.ops.size(); ++i) op_index[g.ops[i].name] = static_cast<int>(i);
  std::vector<std::vector<int64_t>> succ(n);
  std::map<int64_t, int64_t> send_of_tag, recv_of_tag;
  for (size_t i = 0; i < n; ++i) {
    const auto& ins = instrs[i].second;
    for (int64_t d : ins.deps()) succ[d].push_back(static_cast<int64_t>(i));
    if (ins.has_send()) send_of_tag[ins.send().tag()] = static_cast<int64_t>(i);
    if (ins.has_recv()) recv_of_tag[ins.recv().tag()] = static_cast<int64_t>(i);
    if (ins.has_ps_push()) send_of_tag[ins.ps_push().tag()] = static_cast<int64_t>(i);
    if (ins.has_ps_accumulate()) {
      for (int64_t t : ins.ps_accumulate().push_tags()) recv_of_tag[t] = static_cast<int64_t>(i);
    }
  }
  for (const auto& [tag, s] : send_of_tag) {
    auto r = recv_of_tag.find(tag);
    if (r != recv_of_tag.end()) succ[s].push_back(r->second);
  }
  std::vector<double> rank(n, 0.0);
  // Instructions depend only on earlier ids, and a recv's id follows its
  // send's, so a reverse sweep sees every successor first.
  for (size_t k = n; k-- > 0;) {
    const auto& [device, ins] = instrs[k];
    if (ins.kind_case() == quilt::v1::Instruction::KIND_NOT_SET) continue;
    double best = 0;
    for (int64_t s : succ[k]) best = std::max(best, rank[s]);
    rank[k] = EstimateInstruction(ins, device, topo, cost, op_index) + best;
  }
  return rank;
}

}  // namespace quilt
