#include "src/planner/program_validator.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"
#include "src/planner/partial_sums.h"
#include "src/planner/placement.h"

namespace quilt {
namespace {

using quilt::v1::Instruction;

struct Range {
  int64_t begin = 0, end = 0;
  bool whole() const { return begin == 0 && end == 0; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
  bool operator<(const Range& o) const { return begin != o.begin ? begin < o.begin : end < o.end; }
};

// Whether an instance holding `have` contains the rows `need`.
bool Covers(const Range& have, const Range& need) {
  if (have.whole() || have == need) return true;
  return !need.whole() && have.begin <= need.begin && need.end <= have.end;
}

struct Access {
  int tensor;
  Range range;
};

struct Node {
  const Instruction* ins = nullptr;
  int device = 0;
  // Writes of the instruction: [first_write, first_write + num_writes) in
  // Validator::writes_, with whether each holds a partial sum.
  int first_write = 0, num_writes = 0;
};

class Validator {
 public:
  Validator(const quilt::v1::DistributedProgram& p, const GraphIndex& ix, const Topology& topo)
      : p_(p), g_(ix.graph()), ix_(ix), topo_(topo) {}

  absl::Status Run() {
    if (p_.global_batch() <= 0)
      return absl::InvalidArgumentError("the program has no global batch");
    RETURN_IF_ERROR(Index());
    RETURN_IF_ERROR(CheckTransfers());
    RETURN_IF_ERROR(CheckCollectives());
    RETURN_IF_ERROR(CheckDisjointSums());
    RETURN_IF_ERROR(CheckCoverage());
    RETURN_IF_ERROR(CheckStrategy());
    return CheckDataflow();
  }

 private:
  std::string TensorName(int t) const { return g_.tensors()[t].name; }
  const std::string& DeviceName(int d) const { return topo_.device(d).id; }
  bool Batched(int t) const { return g_.tensors()[t].shape.HasBatch(); }

  absl::StatusOr<int> Tensor(const std::string& name) const {
    const int t = ix_.Tensor(name);
    if (t < 0) {
      return absl::InvalidArgumentError("the program names unknown tensor '" + name + "'");
    }
    return t;
  }
  absl::StatusOr<int> Device(const std::string& id) const {
    const int d = topo_.DeviceIndex(id);
    if (d < 0) return absl::InvalidArgumentError("the program names unknown device '" + id + "'");
    return d;
  }
  int64_t Key(int tensor, int device) const {
    return static_cast<int64_t>(tensor) * topo_.num_devices() + device;
  }

  absl::Status Index();
  absl::Status CheckTransfers();
  absl::Status CheckCollectives();
  // No row of a tensor summed by two all-reduces on one device.
  absl::Status CheckDisjointSums();
  absl::Status CheckCoverage();
  absl::Status CheckStrategy();
  absl::Status CheckDataflow();
  // The latest instruction among `n`'s dependencies on its device that
  // writes rows `need` of `tensor` (-1 = resident, -2 = none).
  int Writer(int n, int tensor, const Range& need) const;
  // Rows [begin, end) of dim 0 that slice `r` of `tensor` stands for.
  std::pair<int64_t, int64_t> Rows(int tensor, const Range& r) const;
  // What `n` reads of rows `need`: the slices of partitioned all-reduces
  // among its dependencies written into the tensor's instance after the
  // latest writer (Writer), as far as they overlap `need`, and that writer
  // when they do not cover it (-1 = resident; empty = nothing written).
  std::vector<int> Contributors(int n, int tensor, const Range& need) const;
  absl::Status ReadsOf(int n, std::vector<Access>* reads) const;
  absl::Status AddRange(const quilt::v1::TensorRange& r, std::vector<Access>* out) const {
    ASSIGN_OR_RETURN(int t, Tensor(r.tensor()));
    out->push_back({t, {r.begin(), r.end()}});
    return absl::OkStatus();
  }
  absl::Status WritesOf(int n, std::vector<Access>* writes) const;

  const quilt::v1::DistributedProgram& p_;
  const Graph& g_;
  const GraphIndex& ix_;
  const Topology& topo_;
  std::vector<Node> nodes_;  // in id order
  absl::flat_hash_map<int64_t, int> node_of_id_;
  std::vector<std::vector<int>> deps_;  // node indices
  absl::flat_hash_map<int64_t, int> send_, recv_, push_;
  absl::flat_hash_map<int64_t, std::vector<int>> collective_;
  absl::flat_hash_map<int64_t, std::vector<int>> groups_;
  // Per op: (device, range) of its compute instructions.
  std::vector<std::vector<std::pair<int, Range>>> op_runs_;
  absl::flat_hash_map<int64_t, std::vector<Range>> resident_;  // Key(tensor, device)
  std::vector<Access> writes_;
  std::vector<bool> write_partial_;
};

absl::Status Validator::Index() {
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
        ASSIGN_OR_RETURN(int t, Tensor(r.tensor()));
        resident_[Key(t, d)].push_back({r.begin(), r.end()});
      }
    }
    int64_t previous = -1;
    for (const Instruction& ins : dp.instructions()) {
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
        const int op = ix_.OpIndex(ins.compute().op());
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
    ASSIGN_OR_RETURN(int t, Tensor(pull.parameter().tensor()));
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

absl::Status Validator::CheckCollectives() {
  for (const auto& [cid, members] : collective_) {
    const auto& first = nodes_[members.front()].ins->all_reduce();
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
    bool batched = false;
    for (int t : ix_.Outputs(i)) batched |= Batched(t);
    for (int t : ix_.Inputs(i)) batched |= t >= 0 && Batched(t);
    if (!batched) continue;
    std::vector<Range> r;
    for (const auto& [d, range] : op_runs_[i]) r.push_back(range);
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
  absl::StatusOr<Placement> placed = Place(ix_, p_.strategy(), topo_, p_.global_batch());
  if (!placed.ok()) return Annotate(placed.status(), "the program's strategy");
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    std::vector<std::pair<int, Range>> want;
    for (const Slice& s : placed->op_slices[i]) want.push_back({s.device, {s.begin, s.end}});
    std::vector<std::pair<int, Range>> have = op_runs_[i];
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    if (want != have) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", g_.ops[i].name, "' runs on ", have.size(), " device slice(s), but its group ",
          placed->group_of_op[i], " in the strategy places it on ", want.size()));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::WritesOf(int n, std::vector<Access>* out) const {
  const Instruction& ins = *nodes_[n].ins;
  switch (ins.kind_case()) {
    case Instruction::kCompute: {
      const int op = ix_.OpIndex(ins.compute().op());
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
      for (const auto& name : ins.all_reduce().tensors()) {
        ASSIGN_OR_RETURN(int t, Tensor(name));
        out->push_back({t, {ins.all_reduce().begin(), ins.all_reduce().end()}});
      }
      return absl::OkStatus();
    case Instruction::kPsAccumulate:
      return AddRange(ins.ps_accumulate().gradient(), out);
    case Instruction::kPsPull: {
      ASSIGN_OR_RETURN(int t, Tensor(ins.ps_pull().parameter().tensor()));
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
      const int op = ix_.OpIndex(ins.compute().op());
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
      for (const auto& name : ins.all_reduce().tensors()) {
        ASSIGN_OR_RETURN(int t, Tensor(name));
        out->push_back({t, {ins.all_reduce().begin(), ins.all_reduce().end()}});
      }
      return absl::OkStatus();
    case Instruction::kPsPush: {
      ASSIGN_OR_RETURN(int t, Tensor(ins.ps_push().gradient().tensor()));
      out->push_back({t, {}});
      return absl::OkStatus();
    }
    case Instruction::kPsAccumulate:
      if (ins.ps_accumulate().includes_local()) {
        ASSIGN_OR_RETURN(int t, Tensor(ins.ps_accumulate().gradient().tensor()));
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
  // (op, tensor) → devices where the op reads partial sums of the tensor.
  std::map<std::pair<int, int>, std::set<int>> partial_readers;
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
        const int op = ix_.OpIndex(ins.compute().op());
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
            if (read_partial[k]) partial_readers[{op, reads[k].tensor}].insert(node.device);
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
        out_partial =
            partial_inputs > 0 || (batched_input && !(own.begin == 0 && own.end == batch));
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
        const int op = ix_.OpIndex(ins.compute().op());
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
    const int t = ix_.Tensor(acc.gradient().tensor());
    if (summed != partial_on[t]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the accumulation of '", acc.gradient().tensor(), "' on ",
                       DeviceName(node.device), " sums the partial sums of {", names(summed),
                       "}, but they are on {", names(partial_on[t]), "}"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateProgram(const quilt::v1::DistributedProgram& p, const Graph& g,
                             const Topology& topo) {
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  return ValidateProgram(p, ix, topo);
}

absl::Status ValidateProgram(const quilt::v1::DistributedProgram& p, const GraphIndex& ix,
                             const Topology& topo) {
  return Validator(p, ix, topo).Run();
}

}  // namespace quilt
