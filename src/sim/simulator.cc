#include "src/sim/simulator.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"
#include "src/planner/lower.h"

namespace quilt {
namespace {

using quilt::v1::Instruction;

enum class Kind : uint8_t { kCompute, kSend, kRecv, kAllReduce, kPush, kPull, kLocal };

struct Node {
  const Instruction* ins = nullptr;
  double duration = 0;
  int device = 0;
  int path_from = -1, path_to = -1;  // transfers: the links of PathBetween(from, to)
  int pending = 0;
  int partner = -1;     // send ↔ recv
  int collective = -1;  // index into collectives_
  Kind kind = Kind::kLocal;
  bool done = false;
  bool comm() const { return kind != Kind::kCompute && kind != Kind::kLocal; }
};

// Flat per-node lists: list n is items[begin[n], begin[n + 1]).
struct NodeLists {
  std::vector<std::pair<int, int>> pairs;
  std::vector<int> begin, items;
  void Add(int node, int item) { pairs.push_back({node, item}); }
  void Finish(int nodes) {
    begin.assign(nodes + 1, 0);
    for (const auto& p : pairs) ++begin[p.first + 1];
    for (int k = 0; k < nodes; ++k) begin[k + 1] += begin[k];
    items.resize(pairs.size());
    std::vector<int> at(begin.begin(), begin.end() - 1);
    for (const auto& p : pairs) items[at[p.first]++] = p.second;
    std::vector<std::pair<int, int>>().swap(pairs);
  }
  const int* b(int n) const { return items.data() + begin[n]; }
  const int* e(int n) const { return items.data() + begin[n + 1]; }
};

struct Collective {
  std::vector<int> members;
  std::vector<int> devices;
  std::vector<int> resources;
  int ready = 0;
  double duration = 0;
  int64_t bytes = 0;
};

struct Instance {
  int64_t bytes = 0;
  int64_t begin = 0, end = 0;
  int device = 0;
  int next_same = -1;  // next instance of the same tensor on the same device
  int readers = 0;
  bool persistent = false;
  bool allocated = false;
  bool freed = false;
};

struct Event {
  double time;
  int64_t seq;
  int node;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

class Sim {
 public:
  Sim(const quilt::v1::DistributedProgram& p, const Graph& g, const Topology& t, const CostModel& c,
      const SimOptions& o)
      : prog_(p), g_(g), topo_(t), cost_(c), opt_(o) {}
  absl::StatusOr<SimResult> Run();

 private:
  absl::Status Build();
  absl::StatusOr<int> TensorId(const std::string& name) const;
  int InstanceFor(int tensor, int device, int64_t begin, int64_t end);
  int Containing(int tensor, int device, int64_t begin, int64_t end);
  const std::vector<int>& Links(int n) const;
  std::string Label(int n) const;
  void Ready(int n);
  int BusyLink(int n) const;
  void TryStartComm(int n);
  void FreeLinks(int n);
  void Start(int n);
  void Complete(int n);
  void Dispatch(int device);
  void Alloc(int inst);
  void Release(int inst);

  const quilt::v1::DistributedProgram& prog_;
  const Graph& g_;
  const Topology& topo_;
  const CostModel& cost_;
  const SimOptions& opt_;

  absl::flat_hash_map<std::string, int> op_index_, tensor_index_;
  // Per tensor: whether it carries the batch, bytes per batch row (or per
  // row of dim 0) and whole bytes.
  std::vector<bool> tensor_batched_;
  std::vector<int64_t> tensor_row_bytes_, tensor_bytes_;
  int64_t Bytes(int t, int64_t begin, int64_t end) const {
    if (begin == 0 && end == 0) return tensor_bytes_[t];
    return tensor_row_bytes_[t] * (end - begin);
  }
  std::vector<Node> nodes_;
  NodeLists succ_, reads_, writes_;
  std::vector<double> priority_;
  std::vector<Collective> collectives_;
  std::vector<Instance> instances_;
  absl::flat_hash_map<int64_t, int> first_instance_;  // tensor · devices + device
  std::vector<int> feeds_;

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t seq_ = 0;
  double now_ = 0;
  std::vector<std::priority_queue<std::pair<double, int>>> ready_;  // (priority, -node)
  std::vector<bool> busy_, dirty_;
  std::vector<int> dirty_list_;
  std::vector<bool> link_busy_;
  // Per link: communications waiting for it, (priority, -node).
  std::vector<std::priority_queue<std::pair<double, int>>> link_waiting_;
  std::vector<int64_t> live_, peak_;
  std::vector<double> busy_s_, link_busy_s_;
  std::vector<std::vector<std::pair<double, double>>> compute_iv_, comm_iv_;
  int64_t comm_bytes_ = 0;
  int64_t event_count_ = 0;
  std::vector<TraceEvent> trace_;
};

absl::StatusOr<int> Sim::TensorId(const std::string& name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) return absl::InvalidArgumentError("unknown tensor '" + name + "'");
  return it->second;
}

int Sim::InstanceFor(int tensor, int device, int64_t begin, int64_t end) {
  // Instances of one tensor on one device form a short chain (usually one
  // or two: a slice and the assembled whole).
  auto [head, first] =
      first_instance_.emplace(static_cast<int64_t>(tensor) * topo_.num_devices() + device, -1);
  for (int id = head->second; id >= 0; id = instances_[id].next_same) {
    if (instances_[id].begin == begin && instances_[id].end == end) return id;
  }
  Instance inst;
  inst.device = device;
  inst.begin = begin;
  inst.end = end;
  inst.bytes = Bytes(tensor, begin, end);
  inst.next_same = head->second;
  const int id = static_cast<int>(instances_.size());
  head->second = id;
  instances_.push_back(inst);
  return id;
}

int Sim::Containing(int tensor, int device, int64_t begin, int64_t end) {
  auto it = first_instance_.find(static_cast<int64_t>(tensor) * topo_.num_devices() + device);
  if (it == first_instance_.end()) return -1;
  int found = -1;
  for (int id = it->second; id >= 0; id = instances_[id].next_same) {
    const Instance& i = instances_[id];
    if (i.begin == begin && i.end == end) return id;
    if (found < 0 && ((i.begin == 0 && i.end == 0) || (i.begin <= begin && end <= i.end)))
      found = id;
  }
  return found;
}

const std::vector<int>& Sim::Links(int n) const {
  const Node& node = nodes_[n];
  if (node.kind == Kind::kAllReduce) return collectives_[node.collective].resources;
  static const std::vector<int> kNone;
  if (node.path_from < 0) return kNone;
  return topo_.PathBetween(node.path_from, node.path_to).resources;
}

std::string Sim::Label(int n) const {
  const Instruction& ins = *nodes_[n].ins;
  switch (ins.kind_case()) {
    case Instruction::kCompute:
      return ins.compute().op();
    case Instruction::kSend:
    case Instruction::kRecv:
      return "transfer " +
             (ins.has_send() ? ins.send().range().tensor() : ins.recv().range().tensor());
    case Instruction::kAllReduce:
      return absl::StrCat("all-reduce ", ins.all_reduce().tensors_size(), " tensor(s)");
    case Instruction::kPsPush:
      return "push " + ins.ps_push().gradient().tensor();
    case Instruction::kPsPull:
      return "pull " + ins.ps_pull().parameter().tensor();
    case Instruction::kPsAccumulate:
      return "accumulate " + ins.ps_accumulate().gradient().tensor();
    case Instruction::kConcat:
      return "concat " + ins.concat().target().tensor();
    default:
      return "instruction";
  }
}

absl::Status Sim::Build() {
  op_index_.reserve(g_.ops.size());
  for (size_t i = 0; i < g_.ops.size(); ++i) op_index_[g_.ops[i].name] = static_cast<int>(i);
  tensor_index_.reserve(g_.tensors().size());
  for (size_t i = 0; i < g_.tensors().size(); ++i) {
    const TensorInfo& t = g_.tensors()[i];
    tensor_index_[t.name] = static_cast<int>(i);
    tensor_batched_.push_back(t.shape.HasBatch());
    tensor_bytes_.push_back(RangeBytes(t, 0, 0));
    tensor_row_bytes_.push_back(
        t.shape.HasBatch() ? RangeBytes(t, 0, 1)
                           : (t.shape.rank() == 0 ? tensor_bytes_.back() : RangeBytes(t, 0, 1)));
  }
  std::vector<bool> is_update(g_.ops.size());
  std::vector<std::vector<int>> op_inputs(g_.ops.size()), op_outputs(g_.ops.size());
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    is_update[i] = OpRegistry::Global().Find(g_.ops[i].type)->is_update;
    for (const std::string& in : g_.ops[i].inputs)
      op_inputs[i].push_back(in.empty() ? -1 : tensor_index_.at(in));
    for (const std::string& out : g_.ops[i].outputs) op_outputs[i].push_back(tensor_index_.at(out));
  }
  size_t total = 0;
  for (const auto& dp : prog_.devices()) total += dp.instructions_size();
  nodes_.reserve(total);
  priority_.reserve(total);
  // Instruction id → node: a table when ids are dense (lowered programs
  // number them 0..n-1), a hash map otherwise.
  int64_t max_id = -1;
  bool non_negative = true;
  for (const auto& dp : prog_.devices()) {
    for (const Instruction& ins : dp.instructions()) {
      max_id = std::max(max_id, ins.id());
      non_negative &= ins.id() >= 0;
    }
  }
  const bool dense = non_negative && max_id < 4 * static_cast<int64_t>(total) + 16;
  std::vector<int> id_table(dense ? max_id + 1 : 0, -1);
  absl::flat_hash_map<int64_t, int> id_map;
  auto remember = [&](int64_t id, int n) {
    if (dense) {
      if (id_table[id] >= 0) return false;
      id_table[id] = n;
      return true;
    }
    return id_map.emplace(id, n).second;
  };
  auto node_of = [&](int64_t id) {
    if (dense) return id >= 0 && id <= max_id ? id_table[id] : -1;
    auto it = id_map.find(id);
    return it == id_map.end() ? -1 : it->second;
  };
  first_instance_.reserve(total);
  absl::flat_hash_map<int64_t, int> send_tag, recv_tag, push_tag;
  absl::flat_hash_map<int64_t, int> collective_of;
  absl::flat_hash_map<int64_t, std::vector<int>> groups;
  for (const quilt::v1::DeviceGroup& group : prog_.groups()) {
    std::vector<int>& members = groups[group.id()];
    for (const std::string& m : group.devices()) {
      const int md = topo_.DeviceIndex(m);
      if (md < 0) return absl::InvalidArgumentError("group names unknown device '" + m + "'");
      members.push_back(md);
    }
  }
  for (const quilt::v1::DeviceProgram& dp : prog_.devices()) {
    const int d = topo_.DeviceIndex(dp.device());
    if (d < 0)
      return absl::InvalidArgumentError("program names unknown device '" + dp.device() + "'");
    for (const quilt::v1::TensorRange& r : dp.persistent()) {
      ASSIGN_OR_RETURN(int t, TensorId(r.tensor()));
      instances_[InstanceFor(t, d, r.begin(), r.end())].persistent = true;
    }
    for (const quilt::v1::TensorRange& r : dp.feeds()) {
      ASSIGN_OR_RETURN(int t, TensorId(r.tensor()));
      feeds_.push_back(InstanceFor(t, d, r.begin(), r.end()));
    }
    for (const Instruction& ins : dp.instructions()) {
      const int n = static_cast<int>(nodes_.size());
      if (!remember(ins.id(), n)) {
        return absl::InvalidArgumentError(
            absl::StrCat("instruction id ", ins.id(), " is used twice"));
      }
      Node node;
      node.device = d;
      node.ins = &ins;
      nodes_.push_back(node);
      priority_.push_back(ins.priority());
    }
  }
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const int n = static_cast<int>(ni);
    Node& node = nodes_[n];
    const Instruction& ins = *node.ins;
    const int d = node.device;
    const DeviceSpeed& speed = cost_.speed(d);
    switch (ins.kind_case()) {
      case Instruction::kCompute: {
        node.kind = Kind::kCompute;
        auto it = op_index_.find(ins.compute().op());
        if (it == op_index_.end()) {
          return absl::InvalidArgumentError("program runs unknown op '" + ins.compute().op() + "'");
        }
        const int op = it->second;
        const int64_t b = ins.compute().begin(), e = ins.compute().end();
        const bool shard = is_update[op] && !(b == 0 && e == 0);
        double dur = cost_.OpTime(op, d, e - b);
        if (shard) {
          const TensorInfo& p = g_.tensors()[op_inputs[op][0]];
          const int64_t rows = p.shape.rank() == 0 ? 1 : std::max<int64_t>(1, p.shape.dim(0).value);
          dur *= static_cast<double>(e - b) / static_cast<double>(rows);
        }
        node.duration = dur;
        for (int t : op_inputs[op]) {
          if (t < 0) continue;
          const bool bt = tensor_batched_[t];
          const int inst = Containing(t, d, bt || shard ? b : 0, bt || shard ? e : 0);
          if (inst >= 0) reads_.Add(n, inst);
        }
        if (!is_update[op]) {  // updates write in place
          for (int t : op_outputs[op]) {
            const bool bt = tensor_batched_[t];
            writes_.Add(n, InstanceFor(t, d, bt ? b : 0, bt ? e : 0));
          }
        }
        break;
      }
      case Instruction::kSend: {
        node.kind = Kind::kSend;
        send_tag[ins.send().tag()] = n;
        ASSIGN_OR_RETURN(int t, TensorId(ins.send().range().tensor()));
        const int inst = Containing(t, d, ins.send().range().begin(), ins.send().range().end());
        if (inst >= 0) reads_.Add(n, inst);
        break;
      }
      case Instruction::kRecv: {
        node.kind = Kind::kRecv;
        recv_tag[ins.recv().tag()] = n;
        ASSIGN_OR_RETURN(int t, TensorId(ins.recv().into().tensor()));
        writes_.Add(n, InstanceFor(t, d, ins.recv().into().begin(), ins.recv().into().end()));
        break;
      }
      case Instruction::kConcat: {
        node.kind = Kind::kLocal;
        ASSIGN_OR_RETURN(int t, TensorId(ins.concat().target().tensor()));
        int64_t bytes = 0;
        for (const auto& part : ins.concat().parts()) {
          const int inst = Containing(t, d, part.begin(), part.end());
          if (inst >= 0) reads_.Add(n, inst);
          bytes += Bytes(t, part.begin(), part.end());
        }
        writes_.Add(n,
                    InstanceFor(t, d, ins.concat().target().begin(), ins.concat().target().end()));
        node.duration = 2.0 * bytes / speed.memory_bytes_per_s + speed.overhead_s;
        break;
      }
      case Instruction::kSplit:
        node.kind = Kind::kLocal;
        break;
      case Instruction::kAllReduce: {
        node.kind = Kind::kAllReduce;
        auto [it, fresh] = collective_of.emplace(ins.all_reduce().collective_id(),
                                                 static_cast<int>(collectives_.size()));
        if (fresh) {
          Collective c;
          auto group = groups.find(ins.all_reduce().group());
          if (group == groups.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat("all-reduce ", ins.all_reduce().collective_id(),
                             " names unknown group ", ins.all_reduce().group()));
          }
          c.devices = group->second;
          c.bytes = ins.all_reduce().bytes();
          CostModel::Collective est = cost_.AllReduce(ins.all_reduce().algorithm(), c.devices,
                                                      static_cast<double>(c.bytes));
          c.duration = est.time_s;
          c.resources = std::move(est.resources);
          collectives_.push_back(std::move(c));
        }
        node.collective = it->second;
        collectives_[it->second].members.push_back(n);
        for (const auto& tn : ins.all_reduce().tensors()) {
          ASSIGN_OR_RETURN(int t, TensorId(tn));
          const int inst = InstanceFor(t, d, 0, 0);
          reads_.Add(n, inst);
          writes_.Add(n, inst);
        }
        break;
      }
      case Instruction::kPsPush: {
        node.kind = Kind::kPush;
        push_tag[ins.ps_push().tag()] = n;
        const int server = topo_.DeviceIndex(ins.ps_push().server_device());
        if (server < 0)
          return absl::InvalidArgumentError("unknown server " + ins.ps_push().server_device());
        node.path_from = d;
        node.path_to = server;
        node.duration =
            topo_.PathBetween(d, server).Time(static_cast<double>(ins.ps_push().bytes()));
        comm_bytes_ += ins.ps_push().bytes();
        ASSIGN_OR_RETURN(int t, TensorId(ins.ps_push().gradient().tensor()));
        const int inst = Containing(t, d, 0, 0);
        if (inst >= 0) reads_.Add(n, inst);
        break;
      }
      case Instruction::kPsAccumulate: {
        node.kind = Kind::kLocal;
        const auto& acc = ins.ps_accumulate();
        ASSIGN_OR_RETURN(int t, TensorId(acc.gradient().tensor()));
        const int64_t bytes = Bytes(t, acc.gradient().begin(), acc.gradient().end());
        node.duration =
            (acc.push_tags_size() + 1) * static_cast<double>(bytes) / speed.memory_bytes_per_s +
            speed.overhead_s;
        if (acc.includes_local()) {
          const int inst = Containing(t, d, 0, 0);
          if (inst >= 0) reads_.Add(n, inst);
        }
        writes_.Add(n, InstanceFor(t, d, acc.gradient().begin(), acc.gradient().end()));
        break;
      }
      case Instruction::kPsPull: {
        node.kind = Kind::kPull;
        const int server = topo_.DeviceIndex(ins.ps_pull().server_device());
        if (server < 0)
          return absl::InvalidArgumentError("unknown server " + ins.ps_pull().server_device());
        node.path_from = server;
        node.path_to = d;
        node.duration =
            topo_.PathBetween(server, d).Time(static_cast<double>(ins.ps_pull().bytes()));
        comm_bytes_ += ins.ps_pull().bytes();
        ASSIGN_OR_RETURN(int t, TensorId(ins.ps_pull().parameter().tensor()));
        writes_.Add(n, InstanceFor(t, d, 0, 0));
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " has no kind"));
    }
  }
  const int nn = static_cast<int>(nodes_.size());
  for (int n = 0; n < nn; ++n) {
    for (int64_t dep : nodes_[n].ins->deps()) {
      const int from = node_of(dep);
      if (from < 0) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", nodes_[n].ins->id(),
                                                       " depends on unknown instruction ", dep));
      }
      succ_.Add(from, n);
      ++nodes_[n].pending;
    }
  }
  for (const auto& [tag, s] : send_tag) {
    auto r = recv_tag.find(tag);
    if (r == recv_tag.end()) {
      return absl::InvalidArgumentError(absl::StrCat("send with tag ", tag, " has no receiver"));
    }
    Node& send = nodes_[s];
    Node& recv = nodes_[r->second];
    send.partner = r->second;
    recv.partner = s;
    recv.path_from = send.device;
    recv.path_to = recv.device;
    recv.duration = topo_.PathBetween(send.device, recv.device)
                        .Time(static_cast<double>(send.ins->send().bytes()));
    comm_bytes_ += send.ins->send().bytes();
    ++recv.pending;  // the send side must be ready too
  }
  for (const auto& [tag, r] : recv_tag) {
    if (!send_tag.count(tag)) {
      return absl::InvalidArgumentError(absl::StrCat("receive with tag ", tag, " has no sender"));
    }
  }
  for (int n = 0; n < nn; ++n) {
    const Instruction& ins = *nodes_[n].ins;
    if (!ins.has_ps_accumulate()) continue;
    for (int64_t tag : ins.ps_accumulate().push_tags()) {
      auto it = push_tag.find(tag);
      if (it == push_tag.end()) {
        return absl::InvalidArgumentError(absl::StrCat("accumulate waits for unknown push ", tag));
      }
      succ_.Add(it->second, n);
      ++nodes_[n].pending;
    }
  }
  for (const Collective& c : collectives_) {
    comm_bytes_ +=
        static_cast<int64_t>(2.0 * (c.devices.size() - 1) * static_cast<double>(c.bytes));
  }
  succ_.Finish(nn);
  reads_.Finish(nn);
  writes_.Finish(nn);
  for (int r : reads_.items) ++instances_[r].readers;
  return absl::OkStatus();
}

void Sim::Alloc(int i) {
  Instance& inst = instances_[i];
  if (inst.allocated) return;
  inst.allocated = true;
  live_[inst.device] += inst.bytes;
  peak_[inst.device] = std::max(peak_[inst.device], live_[inst.device]);
}

void Sim::Release(int i) {
  Instance& inst = instances_[i];
  if (inst.persistent || inst.freed || !inst.allocated || inst.readers > 0) return;
  inst.freed = true;
  live_[inst.device] -= inst.bytes;
}

void Sim::Ready(int n) {
  Node& node = nodes_[n];
  switch (node.kind) {
    case Kind::kCompute:
    case Kind::kLocal:
      ready_[node.device].push({priority_[n], -n});
      if (!dirty_[node.device]) {
        dirty_[node.device] = true;
        dirty_list_.push_back(node.device);
      }
      break;
    case Kind::kSend:
      // The transfer belongs to the receiver; tell it the data is ready.
      if (--nodes_[node.partner].pending == 0) Ready(node.partner);
      break;
    case Kind::kAllReduce: {
      Collective& c = collectives_[node.collective];
      if (++c.ready == static_cast<int>(c.members.size())) TryStartComm(c.members[0]);
      break;
    }
    default:
      TryStartComm(n);
  }
}

// A communication starts as soon as every link on its path is free; until
// then it waits in the queue of one busy link (links are never reserved
// ahead, so no link idles while something could use it).
int Sim::BusyLink(int n) const {
  for (int r : Links(n)) {
    if (link_busy_[r]) return r;
  }
  return -1;
}

void Sim::TryStartComm(int n) {
  const int busy = BusyLink(n);
  if (busy >= 0) {
    link_waiting_[busy].push({priority_[n], -n});
  } else {
    Start(n);
  }
}

// Frees the links of a finished communication and starts what waited for
// them, highest priority first across all of them; a waiter that still
// finds another link busy moves to that link's queue.
void Sim::FreeLinks(int n) {
  std::priority_queue<std::tuple<double, int, int>> heads;  // (priority, -node, link)
  auto offer = [&](int r) {
    if (!link_busy_[r] && !link_waiting_[r].empty()) {
      heads.push({link_waiting_[r].top().first, link_waiting_[r].top().second, r});
    }
  };
  for (int r : Links(n)) link_busy_[r] = false;
  for (int r : Links(n)) offer(r);
  while (!heads.empty()) {
    const auto [priority, neg, r] = heads.top();
    heads.pop();
    if (link_busy_[r]) continue;  // taken meanwhile: the waiter stays queued
    link_waiting_[r].pop();
    TryStartComm(-neg);
    offer(r);
  }
}

void Sim::Start(int n) {
  Node& node = nodes_[n];
  double duration = node.duration;
  if (node.kind == Kind::kAllReduce) duration = collectives_[node.collective].duration;
  const double start = now_;
  const double end = start + duration;
  if (node.comm()) {
    for (int r : Links(n)) {
      link_busy_[r] = true;
      link_busy_s_[r] += duration;
    }
  }
  auto involved = [&](auto&& fn) {
    if (node.kind == Kind::kAllReduce) {
      for (int m : collectives_[node.collective].members) fn(m);
    } else {
      fn(n);
      if (node.kind == Kind::kRecv) fn(node.partner);
    }
  };
  // Writers allocate their outputs when they start.
  involved([&](int m) {
    for (const int* w = writes_.b(m); w != writes_.e(m); ++w) Alloc(*w);
  });
  if (!node.comm()) {
    busy_[node.device] = true;
    busy_s_[node.device] += duration;
    compute_iv_[node.device].push_back({start, end});
  } else {
    involved([&](int m) { comm_iv_[nodes_[m].device].push_back({start, end}); });
    if (node.kind == Kind::kPush) comm_iv_[node.path_to].push_back({start, end});
    if (node.kind == Kind::kPull) comm_iv_[node.path_from].push_back({start, end});
  }
  if (opt_.trace) {
    const std::string label = Label(n);
    if (!node.comm()) {
      trace_.push_back({label, "compute", node.device, start, duration});
    } else {
      involved([&](int m) {
        trace_.push_back({label, node.kind == Kind::kAllReduce ? "collective" : "comm",
                          nodes_[m].device, start, duration});
      });
      for (int r : Links(n))
        trace_.push_back({label, "link", topo_.num_devices() + r, start, duration});
    }
  }
  events_.push({end, seq_++, n});
}

void Sim::Complete(int n) {
  Node& node = nodes_[n];
  auto finished = [&](auto&& fn) {
    if (node.kind == Kind::kAllReduce) {
      for (int m : collectives_[node.collective].members) fn(m);
    } else {
      fn(n);
      if (node.kind == Kind::kRecv) fn(node.partner);
    }
  };
  if (!node.comm()) {
    busy_[node.device] = false;
    if (!dirty_[node.device]) {
      dirty_[node.device] = true;
      dirty_list_.push_back(node.device);
    }
  }
  finished([&](int m) {
    nodes_[m].done = true;
    for (const int* r = reads_.b(m); r != reads_.e(m); ++r) {
      --instances_[*r].readers;
      Release(*r);
    }
    for (const int* w = writes_.b(m); w != writes_.e(m); ++w) Release(*w);  // unread outputs
  });
  if (node.comm()) FreeLinks(n);
  finished([&](int m) {
    for (const int* s = succ_.b(m); s != succ_.e(m); ++s) {
      if (--nodes_[*s].pending == 0) Ready(*s);
    }
  });
}

void Sim::Dispatch(int d) {
  if (busy_[d] || ready_[d].empty()) return;
  const int n = -ready_[d].top().second;
  ready_[d].pop();
  Start(n);
}

absl::StatusOr<SimResult> Sim::Run() {
  const absl::Time build_start = absl::Now();
  RETURN_IF_ERROR(Build());
  const absl::Time replay_start = absl::Now();
  const int nd = topo_.num_devices();
  ready_.resize(nd);
  busy_.assign(nd, false);
  dirty_.assign(nd, false);
  link_busy_.assign(topo_.num_resources(), false);
  link_waiting_.resize(topo_.num_resources());
  link_busy_s_.assign(topo_.num_resources(), 0.0);
  live_.assign(nd, 0);
  peak_.assign(nd, 0);
  busy_s_.assign(nd, 0.0);
  compute_iv_.resize(nd);
  comm_iv_.resize(nd);
  for (size_t i = 0; i < instances_.size(); ++i) {
    if (instances_[i].persistent) Alloc(static_cast<int>(i));
  }
  for (int f : feeds_) Alloc(f);
  // Collect first: readying a send can ready its receive, which must not be
  // readied a second time by this loop.
  std::vector<int> initially_ready;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].pending == 0) initially_ready.push_back(static_cast<int>(n));
  }
  for (int n : initially_ready) Ready(n);
  double end_time = 0;
  for (;;) {
    // Devices whose state changed pick their next instruction once every
    // event of this instant is processed (so priorities decide, not order).
    for (int d : dirty_list_) {
      dirty_[d] = false;
      Dispatch(d);
    }
    dirty_list_.clear();
    if (events_.empty()) break;
    now_ = events_.top().time;
    while (!events_.empty() && events_.top().time == now_) {
      const int n = events_.top().node;
      events_.pop();
      ++event_count_;
      Complete(n);
    }
    end_time = now_;
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (!nodes_[n].done) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction ", nodes_[n].ins->id(), " (", Label(static_cast<int>(n)),
                       ") never ran: a dependency cycle or a collective missing members"));
    }
  }
  SimResult r;
  r.prepare_wall_s = absl::ToDoubleSeconds(replay_start - build_start);
  r.replay_wall_s = absl::ToDoubleSeconds(absl::Now() - replay_start);
  r.step_time_s = end_time;
  r.communication_bytes = comm_bytes_;
  r.instructions = static_cast<int64_t>(nodes_.size());
  r.events = event_count_;
  std::vector<bool> used(nd, false);
  for (const Node& node : nodes_) used[node.device] = true;
  for (const Instance& inst : instances_) used[inst.device] = true;
  int critical = -1;
  double critical_end = -1;
  int64_t worst_over = 0;
  for (int d = 0; d < nd; ++d) {
    if (!used[d]) continue;
    DeviceUsage u;
    u.device = topo_.device(d).id;
    u.busy_s = busy_s_[d];
    u.idle_s = std::max(0.0, end_time - busy_s_[d]);
    auto& comm = comm_iv_[d];
    std::sort(comm.begin(), comm.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& iv : comm) {
      if (!merged.empty() && iv.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, iv.second);
      } else {
        merged.push_back(iv);
      }
    }
    auto& compute = compute_iv_[d];
    std::sort(compute.begin(), compute.end());
    double exposed = 0;
    size_t ci = 0;
    for (const auto& [a, b] : merged) {
      double covered = 0;
      while (ci < compute.size() && compute[ci].second <= a) ++ci;
      for (size_t k = ci; k < compute.size() && compute[k].first < b; ++k) {
        covered += std::min(b, compute[k].second) - std::max(a, compute[k].first);
      }
      exposed += (b - a) - covered;
    }
    u.exposed_communication_s = exposed;
    u.peak_memory_bytes = peak_[d];
    u.capacity_bytes = topo_.device(d).proto.memory_bytes();
    u.out_of_memory = u.capacity_bytes > 0 && u.peak_memory_bytes > u.capacity_bytes;
    if (u.out_of_memory && u.peak_memory_bytes - u.capacity_bytes > worst_over) {
      worst_over = u.peak_memory_bytes - u.capacity_bytes;
      r.out_of_memory = absl::StrFormat("%s needs %.2f GiB at its peak, has %.2f GiB", u.device,
                                        u.peak_memory_bytes / double(1 << 30),
                                        u.capacity_bytes / double(1 << 30));
    }
    const double last = std::max(compute.empty() ? 0 : compute.back().second,
                                 merged.empty() ? 0 : merged.back().second);
    if (last > critical_end) {
      critical_end = last;
      critical = static_cast<int>(r.devices.size());
    }
    r.devices.push_back(u);
  }
  if (critical >= 0) {
    const DeviceUsage& c = r.devices[critical];
    r.compute_s = c.busy_s;
    r.exposed_communication_s = c.exposed_communication_s;
    r.idle_s = std::max(0.0, end_time - c.busy_s - c.exposed_communication_s);
  }
  for (int k = 0; k < topo_.num_resources(); ++k) {
    if (link_busy_s_[k] <= 0) continue;
    r.links.push_back({topo_.resource(k).name, link_busy_s_[k],
                       end_time > 0 ? std::min(1.0, link_busy_s_[k] / end_time) : 0});
  }
  r.trace = std::move(trace_);
  return r;
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const quilt::v1::DistributedProgram& program, const Graph& graph,
                                   const Topology& topology, const CostModel& cost,
                                   const SimOptions& options) {
  Sim sim(program, graph, topology, cost, options);
  return sim.Run();
}

}  // namespace quilt
