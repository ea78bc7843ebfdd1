#include "src/planner/priorities.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

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
  // `hint`: the op's or the peer's index; -1: look it up by name.
  double Seconds(const Instruction& ins, int device, int hint) {
    if (cost_ == nullptr) return 1.0;
    switch (ins.kind_case()) {
      case Instruction::kCompute: {
        const int op = hint >= 0 ? hint : g_.OpIndex(ins.compute().op(), ins.compute().op_index());
        if (op < 0) return 0;
        return cost_->OpTime(op, device, ins.compute().end() - ins.compute().begin());
      }
      case Instruction::kSend:
        return PathTime(device, Peer(hint, ins.send().peer_device()), ins.send().bytes(), false);
      case Instruction::kPsPush:
        return PathTime(device, Peer(hint, ins.ps_push().server_device()), ins.ps_push().bytes(),
                        false);
      case Instruction::kPsPull:
        return PathTime(device, Peer(hint, ins.ps_pull().server_device()), ins.ps_pull().bytes(),
                        true);
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
  int Peer(int hint, const std::string& id) const {
    return hint >= 0 ? hint : topo_.DeviceIndex(id);
  }
  double PathTime(int device, int peer, int64_t bytes, bool inbound) const {
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
                                   quilt::v1::ExecutionOrder order, const std::vector<int>* hints) {
  const size_t n = instrs.size();
  Estimator estimate(groups, topo, g, cost);
  // Successors in one array (succ[first[i]..first[i + 1]) are i's): each
  // instruction's dependents, and a send's (or push's) receive(s).
  // Transfers pair by tag: (tag, receiving side, index) sorted, the last
  // sender and receiver of a tag paired.
  std::vector<std::tuple<int64_t, bool, int64_t>> tags;
  std::vector<int64_t> first(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto& ins = *instrs[i].second;
    for (int64_t d : ins.deps()) ++first[d];
    const int64_t at = static_cast<int64_t>(i);
    if (ins.has_send()) tags.push_back({ins.send().tag(), false, at});
    if (ins.has_recv()) tags.push_back({ins.recv().tag(), true, at});
    if (ins.has_ps_push()) tags.push_back({ins.ps_push().tag(), false, at});
    if (ins.has_ps_accumulate()) {
      for (int64_t t : ins.ps_accumulate().push_tags()) tags.push_back({t, true, at});
    }
  }
  std::sort(tags.begin(), tags.end());
  std::vector<std::pair<int64_t, int64_t>> transfers_of_tag;  // (sender, receiver)
  for (size_t a = 0; a < tags.size();) {
    size_t b = a;
    int64_t sender = -1, receiver = -1;
    for (; b < tags.size() && std::get<0>(tags[b]) == std::get<0>(tags[a]); ++b) {
      (std::get<1>(tags[b]) ? receiver : sender) = std::get<2>(tags[b]);
    }
    if (sender >= 0 && receiver >= 0) {
      transfers_of_tag.push_back({sender, receiver});
      ++first[sender];
    }
    a = b;
  }
  // Counts to starts.
  int64_t total = 0;
  for (size_t i = 0; i <= n; ++i) {
    const int64_t c = first[i];
    first[i] = total;
    total += c;
  }
  std::vector<int64_t> succ(total), fill(first.begin(), first.end() - 1);
  for (size_t i = 0; i < n; ++i) {
    for (int64_t d : instrs[i].second->deps()) succ[fill[d]++] = static_cast<int64_t>(i);
  }
  for (const auto& [sender, receiver] : transfers_of_tag) succ[fill[sender]++] = receiver;
  auto successors = [&](size_t i) {
    return absl::MakeConstSpan(succ.data() + first[i], succ.data() + first[i + 1]);
  };
  // Each instruction's own estimated time, and its earliest start with
  // unlimited resources (ids are topological; a receive follows its send).
  std::vector<double> seconds(n, 0.0), earliest(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Instruction& ins = *instrs[i].second;
    if (ins.kind_case() == Instruction::KIND_NOT_SET) continue;
    seconds[i] = estimate.Seconds(ins, instrs[i].first, hints != nullptr ? (*hints)[i] : -1);
  }
  const bool lift_transfers = order == quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST;
  for (size_t i = 0; lift_transfers && i < n; ++i) {
    for (int64_t s : successors(i)) {
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
    for (int64_t s : successors(k)) best = std::max(best, lift[s]);
    rank[k] = seconds[k] + best;
    lift[k] = std::max(rank[k], chain[k]);
  }
  // A forward op whose outputs nothing reads (the loss) holds its inputs
  // until it runs: ranked by its own time it would run last, keeping the
  // logits alive through the whole backward pass. It runs as soon as it
  // is ready instead.
  double top = 0;
  for (double r : rank) top = std::max(top, r);
  for (size_t k = 0; k < n; ++k) {
    const Instruction& ins = *instrs[k].second;
    if (!ins.has_compute() || first[k] != first[k + 1]) continue;
    const int op = hints != nullptr && (*hints)[k] >= 0
                       ? (*hints)[k]
                       : g.OpIndex(ins.compute().op(), ins.compute().op_index());
    if (op >= 0 && !g.Schema(op).is_update) rank[k] = top + seconds[k];
  }
  return rank;
}

}  // namespace quilt
