#include "src/planner/priorities.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace quilt {
namespace {

using quilt::v1::Instruction;

class Estimator {
 public:
  Estimator(const std::vector<std::vector<int>>& groups, const Topology& topo, const GraphIndex& g,
            const CostModel* cost)
      : groups_(groups), topo_(topo), g_(g), cost_(cost) {}

  // Seconds the cost model expects the instruction to take on `device`
  // (transfers alone on their path; collectives with all members).
  double Seconds(const Instruction& ins, int device) {
    if (cost_ == nullptr) return 1.0;
    switch (ins.kind_case()) {
      case Instruction::kCompute: {
        const int op = g_.OpIndex(ins.compute().op());
        if (op < 0) return 0;
        return cost_->OpTime(op, device, ins.compute().end() - ins.compute().begin());
      }
      case Instruction::kSend:
        return PathTime(device, ins.send().peer_device(), ins.send().bytes(), false);
      case Instruction::kPsPush:
        return PathTime(device, ins.ps_push().server_device(), ins.ps_push().bytes(), false);
      case Instruction::kPsPull:
        return PathTime(device, ins.ps_pull().server_device(), ins.ps_pull().bytes(), true);
      case Instruction::kAllReduce: {
        // Every member asks; the estimate is the same for all of them.
        auto [it, fresh] = collective_s_.emplace(ins.all_reduce().collective_id(), 0.0);
        if (fresh) {
          const int64_t g = ins.all_reduce().group();
          if (g >= 1 && g <= static_cast<int64_t>(groups_.size())) {
            it->second = cost_
                             ->AllReduce(ins.all_reduce().algorithm(), groups_[g - 1],
                                         static_cast<double>(ins.all_reduce().bytes()))
                             .time_s;
          }
        }
        return it->second;
      }
      default:
        return 0;
    }
  }

 private:
  double PathTime(int device, const std::string& peer_id, int64_t bytes, bool inbound) const {
    const int peer = topo_.DeviceIndex(peer_id);
    if (peer < 0) return 0;
    const Path& p = inbound ? topo_.PathBetween(peer, device) : topo_.PathBetween(device, peer);
    return p.Time(static_cast<double>(bytes));
  }

  const std::vector<std::vector<int>>& groups_;
  const Topology& topo_;
  const GraphIndex& g_;
  const CostModel* cost_;
  absl::flat_hash_map<int64_t, double> collective_s_;
};

}  // namespace

std::vector<double> HeftPriorities(const std::vector<std::pair<int, Instruction*>>& instrs,
                                   const std::vector<std::vector<int>>& groups,
                                   const Topology& topo, const GraphIndex& g, const CostModel* cost,
                                   quilt::v1::ExecutionOrder order) {
  const size_t n = instrs.size();
  Estimator estimate(groups, topo, g, cost);
  std::vector<std::vector<int64_t>> succ(n);
  absl::flat_hash_map<int64_t, int64_t> send_of_tag, recv_of_tag;
  for (size_t i = 0; i < n; ++i) {
    const auto& ins = *instrs[i].second;
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
  // Each instruction's own estimated time, and its earliest start with
  // unlimited resources (ids are topological; a receive follows its send).
  std::vector<double> seconds(n, 0.0), earliest(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Instruction& ins = *instrs[i].second;
    if (ins.kind_case() == Instruction::KIND_NOT_SET) continue;
    seconds[i] = estimate.Seconds(ins, instrs[i].first);
  }
  const bool lift_transfers = order == quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST;
  for (size_t i = 0; lift_transfers && i < n; ++i) {
    for (int64_t s : succ[i]) {
      earliest[s] = std::max(earliest[s], earliest[i] + seconds[i]);
    }
  }
  // A device's transfers share its links and run one after another, so each
  // waits for the one that can start before it: a gradient's collective then
  // ranks with all the communication queued behind it, and the op that
  // produces it runs before compute that only looks more critical (ranks
  // that ignore this defer every weight gradient to the end of the backward
  // pass and leave no compute for the communication to overlap).
  std::vector<std::vector<int64_t>> transfers(topo.num_devices());
  for (size_t i = 0; lift_transfers && i < n; ++i) {
    const Instruction& ins = *instrs[i].second;
    if (ins.has_all_reduce() || ins.has_send() || ins.has_ps_push() || ins.has_ps_pull()) {
      transfers[instrs[i].first].push_back(static_cast<int64_t>(i));
    }
  }
  for (auto& list : transfers) {
    std::stable_sort(list.begin(), list.end(),
                     [&](int64_t a, int64_t b) { return earliest[a] < earliest[b]; });
  }
  // Each chain's totals, latest transfer first. They lift the ops that feed
  // a transfer, not the transfer's own place on the links, where one on the
  // critical path (a batch-norm statistic, an activation) must still pass
  // queued gradients.
  std::vector<double> chain(n, 0.0);
  for (auto& list : transfers) {
    double below = 0;
    for (size_t k = list.size(); k-- > 0;) {
      below += seconds[list[k]];
      chain[list[k]] = below;
    }
  }
  // Instructions depend only on earlier ids, and a receive's id follows its
  // send's, so a reverse sweep sees every successor first.
  std::vector<double> rank(n, 0.0), lift(n, 0.0);
  for (size_t k = n; k-- > 0;) {
    if (instrs[k].second->kind_case() == Instruction::KIND_NOT_SET) continue;
    double best = 0;
    for (int64_t s : succ[k]) best = std::max(best, lift[s]);
    rank[k] = seconds[k] + best;
    lift[k] = std::max(rank[k], chain[k]);
  }
  return rank;
}

}  // namespace quilt
