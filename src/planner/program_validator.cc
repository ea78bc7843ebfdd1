#include "src/planner/program_validator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/planner/group_nodes.h"
#include "src/planner/lower.h"
#include "src/planner/micro_batches.h"
#include "src/planner/placement.h"
#include "src/planner/validator_state.h"

namespace quilt {
namespace validator_internal {

absl::Status Validator::Index() {
  if (p_.strategy().global_batch() != 0 && p_.strategy().global_batch() != p_.global_batch()) {
    return absl::InvalidArgumentError(absl::StrCat("the program's global batch is ",
                                                   p_.global_batch(), ", its strategy's ",
                                                   p_.strategy().global_batch()));
  }
  op_runs_.resize(g_.ops.size());
  for (const quilt::v1::DeviceGroup& group : p_.groups()) {
    std::vector<int>& members = groups_[group.id()];
    if (!members.empty())
      return absl::InvalidArgumentError(absl::StrCat("group ", group.id(), " is defined twice"));
    std::set<int> seen;
    for (const std::string& id : group.devices()) {
      ASSIGN_OR_RETURN(int d, Device(id));
      if (!seen.insert(d).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("group ", group.id(), " lists ", id, " twice"));
      }
      members.push_back(d);
    }
    if (members.empty())
      return absl::InvalidArgumentError(absl::StrCat("group ", group.id(), " is empty"));
    RETURN_IF_ERROR(CheckGroupNics(group, members));
  }
  std::vector<std::pair<int64_t, std::pair<int, const Instruction*>>> all;
  std::set<int> devices_seen;
  for (const quilt::v1::DeviceProgram& dp : p_.devices()) {
    ASSIGN_OR_RETURN(int d, Device(dp.device()));
    if (!devices_seen.insert(d).second) {
      return absl::InvalidArgumentError("device '" + dp.device() + "' has two programs");
    }
    for (const auto* list : {&dp.persistent(), &dp.feeds()}) {
      for (const quilt::v1::TensorRange& r : *list) {
        ASSIGN_OR_RETURN(int t, Tensor(r.tensor(), r.tensor_index()));
        resident_[Key(t, d)].push_back({r.begin(), r.end()});
      }
    }
    int64_t previous = -1;
    for (const Instruction& ins : dp.instructions()) {
      if (!std::isfinite(ins.priority())) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " on ",
                                                       dp.device(), " has priority ",
                                                       ins.priority(), " (not a finite number)"));
      }
      if (ins.id() <= previous) {
        return absl::InvalidArgumentError(absl::StrCat(
            "instructions on ", dp.device(), " are not in increasing id order at id ", ins.id()));
      }
      previous = ins.id();
      all.push_back({ins.id(), {d, &ins}});
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, entry] : all) {
    if (!node_of_id_.emplace(id, static_cast<int>(nodes_.size())).second) {
      return absl::InvalidArgumentError(absl::StrCat("instruction id ", id, " is used twice"));
    }
    Node node;
    node.device = entry.first;
    node.ins = entry.second;
    nodes_.push_back(node);
  }
  deps_.resize(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Instruction& ins = *nodes_[n].ins;
    for (int64_t dep : ins.deps()) {
      auto it = node_of_id_.find(dep);
      if (it == node_of_id_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("instruction ", ins.id(), " depends on missing instruction ", dep));
      }
      if (dep >= ins.id()) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " on ",
                                                       DeviceName(nodes_[n].device),
                                                       " depends on a later instruction ", dep));
      }
      deps_[n].push_back(it->second);
    }
    const int in = static_cast<int>(n);
    switch (ins.kind_case()) {
      case Instruction::kSend:
        if (!send_.emplace(ins.send().tag(), in).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("send tag ", ins.send().tag(), " is used twice"));
        }
        break;
      case Instruction::kRecv:
        if (!recv_.emplace(ins.recv().tag(), in).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("receive tag ", ins.recv().tag(), " is used twice"));
        }
        break;
      case Instruction::kPsPush:
        if (!push_.emplace(ins.ps_push().tag(), in).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("push tag ", ins.ps_push().tag(), " is used twice"));
        }
        break;
      case Instruction::kAllReduce:
        collective_[ins.all_reduce().collective_id()].push_back(in);
        break;
      case Instruction::kCompute: {
        const int op = ix_.OpIndex(ins.compute().op(), ins.compute().op_index());
        if (op < 0) {
          return absl::InvalidArgumentError("instruction " + std::to_string(ins.id()) +
                                            " runs unknown op '" + ins.compute().op() + "'");
        }
        op_runs_[op].push_back({nodes_[n].device, {ins.compute().begin(), ins.compute().end()}});
        break;
      }
      case Instruction::KIND_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " has no kind"));
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckTransfers() {
  for (const auto& [tag, s] : send_) {
    auto r = recv_.find(tag);
    if (r == recv_.end())
      return absl::InvalidArgumentError(absl::StrCat("send tag ", tag, " has no receive"));
    const auto& send = nodes_[s].ins->send();
    const auto& recv = nodes_[r->second].ins->recv();
    if (send.bytes() != recv.bytes() || send.range().tensor() != recv.range().tensor() ||
        send.range().begin() != recv.range().begin() || send.range().end() != recv.range().end() ||
        topo_.DeviceIndex(send.peer_device()) != nodes_[r->second].device ||
        topo_.DeviceIndex(recv.peer_device()) != nodes_[s].device) {
      return absl::InvalidArgumentError(
          absl::StrCat("send and receive with tag ", tag, " do not match"));
    }
    const Range got{recv.range().begin(), recv.range().end()};
    const Range into{recv.into().begin(), recv.into().end()};
    if (recv.into().tensor() != recv.range().tensor() || !Covers(into, got)) {
      return absl::InvalidArgumentError(
          absl::StrCat("receive tag ", tag, " writes rows outside its target"));
    }
  }
  for (const auto& [tag, r] : recv_) {
    if (!send_.count(tag))
      return absl::InvalidArgumentError(absl::StrCat("receive tag ", tag, " has no send"));
  }
  // Every push is accumulated exactly once, on its server.
  absl::flat_hash_map<int64_t, int> accumulated;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Instruction& ins = *nodes_[n].ins;
    if (!ins.has_ps_accumulate()) continue;
    for (int64_t tag : ins.ps_accumulate().push_tags()) {
      auto it = push_.find(tag);
      if (it == push_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("accumulation ", ins.id(),
                                                       " waits for push tag ", tag,
                                                       ", which no instruction pushes"));
      }
      const auto& push = nodes_[it->second].ins->ps_push();
      if (topo_.DeviceIndex(push.server_device()) != nodes_[n].device ||
          push.gradient().tensor() != ins.ps_accumulate().gradient().tensor()) {
        return absl::InvalidArgumentError(
            absl::StrCat("push tag ", tag, " does not match its accumulation ", ins.id()));
      }
      if (++accumulated[tag] > 1) {
        return absl::InvalidArgumentError(absl::StrCat("push tag ", tag, " is accumulated twice"));
      }
    }
  }
  for (const auto& [tag, n] : push_) {
    if (!accumulated.count(tag)) {
      return absl::InvalidArgumentError(absl::StrCat("push tag ", tag, " of '",
                                                     nodes_[n].ins->ps_push().gradient().tensor(),
                                                     "' is never accumulated"));
    }
  }
  // Pulls read a shard their server holds.
  for (const Node& node : nodes_) {
    if (!node.ins->has_ps_pull()) continue;
    const auto& pull = node.ins->ps_pull();
    ASSIGN_OR_RETURN(int server, Device(pull.server_device()));
    ASSIGN_OR_RETURN(int t, Tensor(pull.parameter().tensor(), pull.parameter().tensor_index()));
    const Range need{pull.parameter().begin(), pull.parameter().end()};
    bool held = false;
    auto it = resident_.find(Key(t, server));
    if (it != resident_.end()) {
      for (const Range& r : it->second) held |= Covers(r, need);
    }
    if (!held) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction ", node.ins->id(), " pulls '", pull.parameter().tensor(),
                       "' from ", pull.server_device(), ", which does not hold it"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckGroupNics(const quilt::v1::DeviceGroup& group,
                                       const std::vector<int>& members) const {
  const std::vector<double> want = ExchangeBytesPerS(topo_, members);
  if (group.node_bytes_per_s_size() == 0) {
    if (want.empty()) return absl::OkStatus();
    // The executor would split evenly what the simulator prices by bandwidth.
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", group.id(),
        " carries no node bandwidths, but its nodes' bandwidths differ "
        "(the two-level all-reduce sizes their parts by them): lower the program again"));
  }
  if (group.node_bytes_per_s_size() != group.devices_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group.id(), " has ", group.devices_size(), " devices but ",
                     group.node_bytes_per_s_size(), " node bandwidths"));
  }
  if (want.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group.id(),
                     " carries node bandwidths, but its nodes need none (fewer than "
                     "three, or their bandwidths alike: equal parts); drop node_bytes_per_s"));
  }
  for (int m = 0; m < group.devices_size(); ++m) {
    if (group.node_bytes_per_s(m) != want[m]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", group.id(), " gives ", group.devices(m), "'s node ", group.node_bytes_per_s(m),
          " bytes/s across nodes; the cluster gives it ", want[m]));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckCollectives() {
  for (const auto& [cid, members] : collective_) {
    const auto& first = nodes_[members.front()].ins->all_reduce();
    switch (first.algorithm()) {
      case quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE:
      case quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE:
      case quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE:
      case quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE:
        break;
      default: {
        const std::string& name = quilt::v1::AggregationMethod_Name(first.algorithm());
        return absl::InvalidArgumentError(
            absl::StrCat("all-reduce ", cid, " has algorithm ",
                         name.empty() ? std::to_string(first.algorithm()) : name,
                         ", not an all-reduce's (ring, tree, hierarchical or direct)"));
      }
    }
    auto group = groups_.find(first.group());
    if (group == groups_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-reduce ", cid, " names unknown group ", first.group()));
    }
    std::vector<int> devices;
    for (int m : members) {
      const auto& ar = nodes_[m].ins->all_reduce();
      if (ar.group() != first.group() || ar.bytes() != first.bytes() ||
          ar.tensors_size() != first.tensors_size() ||
          !std::equal(ar.tensors().begin(), ar.tensors().end(), first.tensors().begin()) ||
          ar.algorithm() != first.algorithm() || ar.begin() != first.begin() ||
          ar.end() != first.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the members of all-reduce ", cid, " disagree"));
      }
      devices.push_back(nodes_[m].device);
    }
    std::vector<int> expected = group->second;
    std::sort(devices.begin(), devices.end());
    std::sort(expected.begin(), expected.end());
    if (devices != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all-reduce ", cid, " has members on ", devices.size(), " devices, not on each of the ",
          expected.size(), " devices of group ", first.group()));
    }
    int64_t bytes = 0;
    for (const std::string& name : first.tensors()) {
      ASSIGN_OR_RETURN(int t, Tensor(name));
      bytes +=
          Batched(t) ? 0 : g_.tensors()[t].shape.NumElements(1) * DTypeSize(g_.tensors()[t].dtype);
      if (Batched(t)) {
        return absl::InvalidArgumentError("all-reduce " + std::to_string(cid) +
                                          " sums batch tensor '" + name + "'");
      }
    }
    if (first.begin() != 0 || first.end() != 0) {
      const int64_t rows =
          first.tensors_size() == 1 ? Rows(ix_.Tensor(first.tensors(0)), Range{}).second : 0;
      if (first.tensors_size() != 1 || first.begin() < 0 || first.begin() >= first.end() ||
          first.end() > rows) {
        return absl::InvalidArgumentError(absl::StrCat(
            "all-reduce ", cid, " sums rows [", first.begin(), ", ", first.end(), ") of ",
            first.tensors_size() == 1 ? "'" + first.tensors(0) + "'" : "several tensors",
            first.tensors_size() == 1 ? absl::StrCat(", which has ", rows, " rows") : "",
            "; a slice is whole rows of one tensor"));
      }
      bytes = bytes / rows * (first.end() - first.begin());
    }
    if (bytes != first.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("all-reduce ", cid, " says ", first.bytes(),
                                                     " bytes; its tensors hold ", bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckDisjointSums() {
  // Per (tensor, device): the rows each all-reduce there sums. A row summed
  // by two of them, dependent or not, is summed twice.
  absl::flat_hash_map<int64_t, std::vector<std::tuple<int64_t, int64_t, int64_t>>> sums;
  for (const Node& node : nodes_) {
    if (!node.ins->has_all_reduce()) continue;
    const auto& ar = node.ins->all_reduce();
    for (const std::string& name : ar.tensors()) {
      ASSIGN_OR_RETURN(int t, Tensor(name));
      auto [b, e] = Rows(t, Range{ar.begin(), ar.end()});
      sums[Key(t, node.device)].push_back({b, e, node.ins->id()});
    }
  }
  for (auto& [key, ranges] : sums) {
    std::sort(ranges.begin(), ranges.end());
    for (size_t k = 1; k < ranges.size(); ++k) {
      const auto& [pb, pe, pid] = ranges[k - 1];
      const auto& [b, e, id] = ranges[k];
      if (b < pe) {
        const int t = static_cast<int>(key / topo_.num_devices());
        return absl::InvalidArgumentError(
            absl::StrCat("instructions ", pid, " and ", id, " on ",
                         DeviceName(static_cast<int>(key % topo_.num_devices())),
                         " both sum rows [", b, ", ", std::min(e, pe), ") of '", TensorName(t),
                         "' (a gradient must be aggregated exactly once)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckCoverage() {
  const int64_t batch = p_.global_batch();
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    const Op& op = g_.ops[i];
    if (op_runs_[i].empty())
      return absl::InvalidArgumentError("op '" + op.name + "' runs on no device");
    if (!WorksOnBatchRows(ix_, static_cast<int>(i))) continue;
    std::vector<Range> r;
    // Each device's runs: the whole batch once, or each micro-batch once.
    std::map<int, std::vector<Range>> on;
    for (const auto& [d, range] : op_runs_[i]) {
      r.push_back(range);
      on[d].push_back(range);
    }
    bool every_whole = true;
    const int64_t micro = std::max<int64_t>(1, p_.micro_batches());
    for (auto& [d, runs] : on) {
      std::sort(runs.begin(), runs.end());
      every_whole &= static_cast<int64_t>(runs.size()) == micro;
      for (size_t j = 0; j < runs.size() && every_whole; ++j) {
        const MicroBatchSpan m =
            MicroBatchRange(batch, static_cast<int>(micro), static_cast<int>(j));
        every_whole &= runs[j] == Range{m.begin, m.end};
      }
    }
    // An op whose outputs do not carry the batch may run over the whole
    // batch on several devices, once on each: each computes the complete
    // value (a gathered embedding lookup's gradient).
    bool batched_out = false;
    for (int t : ix_.Outputs(i)) batched_out |= Batched(t);
    if (every_whole && !batched_out) continue;
    std::sort(r.begin(), r.end());
    int64_t at = 0;
    for (const Range& x : r) {
      if (x.begin != at || x.end <= x.begin) {
        return absl::InvalidArgumentError(absl::StrCat("the replicas of op '", op.name,
                                                       "' do not cover the batch [0, ", batch,
                                                       ") exactly once"));
      }
      at = x.end;
    }
    if (at != batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("the replicas of op '", op.name, "' stop at row ", at, " of ", batch));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckStrategy() {
  if (p_.strategy().groups_size() == 0) return absl::OkStatus();  // hand-built program
  // (With gradient accumulation, placed at a micro-batch's rows, each op
  // on batch rows once per micro-batch.)
  const int micro = std::max(1, p_.strategy().micro_batches());
  if (std::max<int64_t>(1, p_.micro_batches()) != micro) {
    return absl::InvalidArgumentError(absl::StrCat("the program runs ", p_.micro_batches(),
                                                   " micro-batches, its strategy ", micro));
  }
  absl::StatusOr<int64_t> rows = MicroBatchRows(p_.global_batch(), micro);
  if (!rows.ok()) return Annotate(rows.status(), "the program's strategy");
  // Placed at the largest micro-batch's rows, and where micro-batches
  // differ, at the smaller ones' too.
  // (The smaller from the larger: PlaceSmallerMicroBatches.)
  std::map<int64_t, Placement> placed;
  {
    absl::StatusOr<Placement> p = Place(ix_, p_.strategy(), topo_, *rows);
    if (!p.ok()) return Annotate(p.status(), "the program's strategy");
    placed.emplace(*rows, *std::move(p));
  }
  if (micro > 1 && p_.global_batch() % micro != 0) {
    absl::StatusOr<Placement> p =
        PlaceSmallerMicroBatches(ix_, p_.strategy(), topo_, placed.at(*rows));
    if (!p.ok()) return Annotate(p.status(), "the program's strategy");
    placed.emplace(*rows - 1, *std::move(p));
  }
  const Placement& largest = placed.at(*rows);
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    const bool batched = WorksOnBatchRows(ix_, static_cast<int>(i));
    std::vector<std::pair<int, Range>> want;
    if (micro == 1 || !batched) {
      for (const Slice& s : largest.op_slices[i]) want.push_back({s.device, {s.begin, s.end}});
    }
    for (int j = 0; j < micro && micro > 1 && batched; ++j) {
      const MicroBatchSpan m = MicroBatchRange(p_.global_batch(), micro, j);
      for (const Slice& s : placed.at(m.end - m.begin).op_slices[i]) {
        const Range r =
            s.begin == 0 && s.end == 0 ? Range{0, m.end - m.begin} : Range{s.begin, s.end};
        want.push_back({s.device, {r.begin + m.begin, r.end + m.begin}});
      }
    }
    std::vector<std::pair<int, Range>> have = op_runs_[i];
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    if (want != have) {
      auto list = [&](const std::vector<std::pair<int, Range>>& runs) {
        std::string out;
        for (const auto& [d, r] : runs) {
          absl::StrAppend(
              &out, out.empty() ? "" : ", ", DeviceName(d),
              r.begin == r.end ? "" : absl::StrCat(" rows [", r.begin, ", ", r.end, ")"));
        }
        return out;
      };
      return absl::InvalidArgumentError(
          absl::StrCat("op '", g_.ops[i].name, "' runs on ", list(have), ", but its group ",
                       largest.group_of_op[i], " in the strategy places it on ", list(want)));
    }
  }
  return absl::OkStatus();
}

}  // namespace validator_internal

using validator_internal::Validator;

absl::Status ValidateProgram(const quilt::v1::DistributedProgram& p, const Graph& g,
                             const Topology& topo) {
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  return ValidateProgram(p, ix, topo);
}

absl::Status ValidateProgram(const quilt::v1::DistributedProgram& p, const GraphIndex& ix,
                             const Topology& topo) {
  ChargeWork(kValidateWorkPerInstruction * InstructionCount(p));  // (work_clock.h)
  return Validator(p, ix, topo).Run();
}

}  // namespace quilt