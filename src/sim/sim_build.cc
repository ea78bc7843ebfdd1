// Preparing a DistributedProgram for replay: instructions become nodes
// with durations from the cost model, dependencies and send/receive,
// push/accumulate pairs become successor lists, and tensor reads and writes
// become reference-counted instances per device.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/graph/op_registry.h"
#include "src/planner/lower.h"
#include "src/sim/sim_state.h"

namespace quilt::sim_internal {

using quilt::v1::Instruction;

absl::StatusOr<int> Sim::TensorId(const std::string& name, int hint) const {
  const int t = ix_->Tensor(name, hint);
  if (t < 0) return absl::InvalidArgumentError("unknown tensor '" + name + "'");
  return t;
}

int& Sim::HeadInMap(int64_t key) { return head_map_.emplace(key, -1).first->second; }

int Sim::InstanceFor(int tensor, int device, int64_t begin, int64_t end) {
  // Instances of one tensor on one device form a short chain (usually one
  // or two: a slice and the assembled whole).
  int& head = FirstInstance(tensor, device);
  for (int id = head; id >= 0; id = instances_[id].next_same) {
    if (instances_[id].begin == begin && instances_[id].end == end) return id;
  }
  Instance inst;
  inst.device = device;
  inst.begin = begin;
  inst.end = end;
  inst.bytes = Bytes(tensor, begin, end);
  inst.next_same = head;
  const int id = static_cast<int>(instances_.size());
  head = id;
  instances_.push_back(inst);
  return id;
}

int Sim::Containing(int tensor, int device, int64_t begin, int64_t end,
                    const google::protobuf::RepeatedField<int64_t>* deps) {
  int found = -1, from_dep = -1;
  for (int id = FirstInstance(tensor, device); id >= 0; id = instances_[id].next_same) {
    const Instance& i = instances_[id];
    if (i.begin == begin && i.end == end) return id;
    if (!((i.begin == 0 && i.end == 0) || (i.begin <= begin && end <= i.end))) continue;
    if (found < 0) found = id;
    if (from_dep < 0 && deps != nullptr &&
        (i.writer < 0 || std::find(deps->begin(), deps->end(), i.writer) != deps->end())) {
      from_dep = id;
    }
  }
  return from_dep >= 0 ? from_dep : found;
}

absl::Status Sim::ServerTransfer(const std::string& server_device, int64_t bytes, bool to_server,
                                 Node* node) {
  const int server = topo_.DeviceIndex(server_device);
  if (server < 0) return absl::InvalidArgumentError("unknown server " + server_device);
  node->path_from = to_server ? node->device : server;
  node->path_to = to_server ? server : node->device;
  node->duration =
      topo_.PathBetween(node->path_from, node->path_to).Time(static_cast<double>(bytes));
  if (server != node->device) comm_bytes_ += bytes;  // (a server's own: a copy)
  return absl::OkStatus();
}

namespace {

// Asks for the memory an instruction's fields point to.
void PrefetchParts(const Instruction& ins) {
  if (!ins.deps().empty()) __builtin_prefetch(ins.deps().data());
  switch (ins.kind_case()) {
    case Instruction::kCompute:
      __builtin_prefetch(&ins.compute());
      break;
    case Instruction::kSend:
      __builtin_prefetch(&ins.send());
      break;
    case Instruction::kRecv:
      __builtin_prefetch(&ins.recv());
      break;
    default:
      break;
  }
}

}  // namespace

absl::Status Sim::Build() {
  ix_ = opt_.index;
  num_devices_ = topo_.num_devices();
  if (ix_ == nullptr || &ix_->graph() != &g_) {
    ASSIGN_OR_RETURN(own_index_, GraphIndex::Build(g_));
    ix_ = &*own_index_;
  }
  for (size_t i = 0; i < g_.tensors().size(); ++i) {
    const TensorInfo& t = g_.tensors()[i];
    tensor_bytes_.push_back(RangeBytes(t, 0, 0));
    tensor_row_bytes_.push_back(
        t.shape.HasBatch() ? RangeBytes(t, 0, 1)
                           : (t.shape.rank() == 0 ? tensor_bytes_.back() : RangeBytes(t, 0, 1)));
  }
  auto is_update = [&](int op) { return ix_->Schema(op).is_update; };
  const auto total = static_cast<size_t>(InstructionCount(prog_));
  nodes_.reserve(total);
  priority_.reserve(total);
  // Instruction id → node: a table for ids below a few times the count
  // (lowered programs number them 0..n-1), a hash map for others.
  const int64_t table_ids = 2 * static_cast<int64_t>(total) + 16;
  std::vector<int> id_table(static_cast<size_t>(table_ids), -1);
  absl::flat_hash_map<int64_t, int> id_map;
  auto remember = [&](int64_t id, int n) {
    if (id >= 0 && id < table_ids) {
      if (id_table[id] >= 0) return false;
      id_table[id] = n;
      return true;
    }
    return id_map.emplace(id, n).second;
  };
  auto node_of = [&](int64_t id) {
    if (id >= 0 && id < table_ids) return id_table[id];
    auto it = id_map.find(id);
    return it == id_map.end() ? -1 : it->second;
  };
  // A table of (tensor, device) heads where it stays small, a hash map
  // beyond (graphs of many tensors on many devices).
  const int64_t heads = static_cast<int64_t>(g_.tensors().size()) * topo_.num_devices();
  if (heads <= kMaxHeadTable) {
    head_table_.assign(static_cast<size_t>(heads), -1);
  } else {
    head_map_.reserve(total);
  }
  instances_.reserve(total);
  reads_.begin.reserve(total + 1);
  reads_.items.reserve(2 * total);
  writes_.begin.reserve(total + 1);
  writes_.items.reserve(total);
  absl::flat_hash_map<int64_t, int> recv_tag, push_tag;
  // Read while each instruction is at hand (a large program does not stay
  // in cache): each send's node and bytes by tag, (node, instruction id it
  // depends on) and (accumulate, push tag).
  absl::flat_hash_map<int64_t, std::pair<int, int64_t>> send_tag;
  std::vector<std::pair<int, int64_t>> deps, accumulates;
  deps.reserve(2 * total);
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
  std::vector<int> device_of;
  device_of.reserve(prog_.devices_size());
  for (const quilt::v1::DeviceProgram& dp : prog_.devices()) {
    const int d = topo_.DeviceIndex(dp.device());
    if (d < 0)
      return absl::InvalidArgumentError("program names unknown device '" + dp.device() + "'");
    device_of.push_back(d);
    for (const quilt::v1::TensorRange& r : dp.persistent()) {
      ASSIGN_OR_RETURN(int t, TensorId(r.tensor(), r.tensor_index()));
      instances_[InstanceFor(t, d, r.begin(), r.end())].persistent = true;
    }
    for (const quilt::v1::TensorRange& r : dp.feeds()) {
      ASSIGN_OR_RETURN(int t, TensorId(r.tensor(), r.tensor_index()));
      feeds_.push_back(InstanceFor(t, d, r.begin(), r.end()));
    }
  }
  // One pass over the instructions.
  for (int di = 0; di < prog_.devices_size(); ++di) {
    const int d = device_of[di];
    const DeviceSpeed& speed = cost_.speed(d);
    const auto& list = prog_.devices(di).instructions();
    for (int i = 0; i < list.size(); ++i) {
      // Instructions lie apart in memory, each with its parts behind
      // pointers: fetch a later one's, and its parts', ahead of use.
      if (i + 8 < list.size()) __builtin_prefetch(&list.Get(i + 8));
      if (i + 4 < list.size()) PrefetchParts(list.Get(i + 4));
      const Instruction& ins = list.Get(i);
      const int n = static_cast<int>(nodes_.size());
      if (!remember(ins.id(), n)) {
        return absl::InvalidArgumentError(
            absl::StrCat("instruction id ", ins.id(), " is used twice"));
      }
      nodes_.emplace_back();
      reads_.Open();
      writes_.Open();
      const size_t first_write = writes_.items.size();
      Node& node = nodes_.back();
      node.device = d;
      node.ins = &ins;
      priority_.push_back(ins.priority());
      for (int64_t dep : ins.deps()) deps.push_back({n, dep});
      switch (ins.kind_case()) {
        case Instruction::kCompute: {
          node.kind = Kind::kCompute;
          const int op = ix_->OpIndex(ins.compute().op(), ins.compute().op_index());
          if (op < 0) {
            return absl::InvalidArgumentError("program runs unknown op '" + ins.compute().op() +
                                              "'");
          }
          const int64_t b = ins.compute().begin(), e = ins.compute().end();
          const bool shard = is_update(op) && !(b == 0 && e == 0);
          double dur = cost_.OpTime(op, d, e - b);
          if (shard) {
            const TensorInfo& p = g_.tensors()[ix_->Inputs(op)[0]];
            const int64_t rows =
                p.shape.rank() == 0 ? 1 : std::max<int64_t>(1, p.shape.dim(0).value);
            dur *= static_cast<double>(e - b) / static_cast<double>(rows);
          }
          node.duration = dur;
          for (int t : ix_->Inputs(op)) {
            if (t < 0) continue;
            const bool bt = ix_->Batched(t);
            const int inst =
                Containing(t, d, bt || shard ? b : 0, bt || shard ? e : 0, &ins.deps());
            if (inst >= 0) reads_.Append(inst);
          }
          if (!is_update(op)) {  // updates write in place
            for (int t : ix_->Outputs(op)) {
              const bool bt = ix_->Batched(t);
              writes_.Append(InstanceFor(t, d, bt ? b : 0, bt ? e : 0));
            }
          }
          break;
        }
        case Instruction::kSend: {
          node.kind = Kind::kSend;
          send_tag[ins.send().tag()] = {n, ins.send().bytes()};
          ASSIGN_OR_RETURN(
              int t, TensorId(ins.send().range().tensor(), ins.send().range().tensor_index()));
          const int inst =
              Containing(t, d, ins.send().range().begin(), ins.send().range().end(), &ins.deps());
          if (inst >= 0) reads_.Append(inst);
          break;
        }
        case Instruction::kRecv: {
          node.kind = Kind::kRecv;
          recv_tag[ins.recv().tag()] = n;
          ASSIGN_OR_RETURN(int t,
                           TensorId(ins.recv().into().tensor(), ins.recv().into().tensor_index()));
          writes_.Append(InstanceFor(t, d, ins.recv().into().begin(), ins.recv().into().end()));
          break;
        }
        case Instruction::kConcat: {
          node.kind = Kind::kLocal;
          ASSIGN_OR_RETURN(int t, TensorId(ins.concat().target().tensor(),
                                           ins.concat().target().tensor_index()));
          int64_t bytes = 0;
          for (const auto& part : ins.concat().parts()) {
            const int inst = Containing(t, d, part.begin(), part.end(), &ins.deps());
            if (inst >= 0) reads_.Append(inst);
            bytes += Bytes(t, part.begin(), part.end());
          }
          writes_.Append(
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
          // The staging buffer of the sum; a direct all-reduce also receives
          // every other member's buffer whole.
          node.scratch = ins.all_reduce().bytes();
          if (ins.all_reduce().algorithm() == quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE) {
            node.scratch *= static_cast<int64_t>(collectives_[it->second].devices.size());
          }
          collectives_[it->second].members.push_back(n);
          for (const auto& tn : ins.all_reduce().tensors()) {
            ASSIGN_OR_RETURN(int t, TensorId(tn));
            const int inst = InstanceFor(t, d, 0, 0);
            reads_.Append(inst);
            writes_.Append(inst);
          }
          break;
        }
        case Instruction::kPsPush: {
          node.kind = Kind::kPush;
          push_tag[ins.ps_push().tag()] = n;
          RETURN_IF_ERROR(ServerTransfer(ins.ps_push().server_device(), ins.ps_push().bytes(),
                                         /*to_server=*/true, &node));
          ASSIGN_OR_RETURN(int t, TensorId(ins.ps_push().gradient().tensor(),
                                           ins.ps_push().gradient().tensor_index()));
          const int inst = Containing(t, d, 0, 0, &ins.deps());
          if (inst >= 0) reads_.Append(inst);
          break;
        }
        case Instruction::kPsAccumulate: {
          node.kind = Kind::kLocal;
          const auto& acc = ins.ps_accumulate();
          ASSIGN_OR_RETURN(int t, TensorId(acc.gradient().tensor(), acc.gradient().tensor_index()));
          const int64_t bytes = Bytes(t, acc.gradient().begin(), acc.gradient().end());
          node.duration =
              (acc.push_tags_size() + 1) * static_cast<double>(bytes) / speed.memory_bytes_per_s +
              speed.overhead_s;
          node.scratch = acc.push_tags_size() * bytes;
          node.local_deps = ins.deps_size();
          node.accumulate = true;
          for (int64_t tag : acc.push_tags()) accumulates.push_back({n, tag});
          if (acc.includes_local()) {
            const int inst = Containing(t, d, 0, 0, &ins.deps());
            if (inst >= 0) reads_.Append(inst);
          }
          writes_.Append(InstanceFor(t, d, acc.gradient().begin(), acc.gradient().end()));
          break;
        }
        case Instruction::kPsPull: {
          node.kind = Kind::kPull;
          RETURN_IF_ERROR(ServerTransfer(ins.ps_pull().server_device(), ins.ps_pull().bytes(),
                                         /*to_server=*/false, &node));
          ASSIGN_OR_RETURN(int t, TensorId(ins.ps_pull().parameter().tensor(),
                                           ins.ps_pull().parameter().tensor_index()));
          writes_.Append(InstanceFor(t, d, 0, 0));
          break;
        }
        default:
          return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " has no kind"));
      }
      for (size_t w = first_write; w < writes_.items.size(); ++w) {
        instances_[writes_.items[w]].writer = ins.id();
      }
    }
  }
  const int nn = static_cast<int>(nodes_.size());
  for (const auto& [n, dep] : deps) {
    const int from = node_of(dep);
    if (from < 0) {
      return absl::InvalidArgumentError(absl::StrCat("instruction ", nodes_[n].ins->id(),
                                                     " depends on unknown instruction ", dep));
    }
    succ_.Add(from, n);
    ++nodes_[n].pending;
  }
  for (const auto& [tag, sent] : send_tag) {
    const auto [s, bytes] = sent;
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
    recv.duration = topo_.PathBetween(send.device, recv.device).Time(static_cast<double>(bytes));
    if (send.device != recv.device) comm_bytes_ += bytes;
    ++recv.pending;  // the send side must be ready too
  }
  for (const auto& [tag, r] : recv_tag) {
    if (!send_tag.count(tag)) {
      return absl::InvalidArgumentError(absl::StrCat("receive with tag ", tag, " has no sender"));
    }
  }
  for (const auto& [n, tag] : accumulates) {
    auto it = push_tag.find(tag);
    if (it == push_tag.end()) {
      return absl::InvalidArgumentError(absl::StrCat("accumulate waits for unknown push ", tag));
    }
    succ_.Add(it->second, n);
    ++nodes_[n].pending;
  }
  for (const Collective& c : collectives_) {
    comm_bytes_ +=
        static_cast<int64_t>(2.0 * (c.devices.size() - 1) * static_cast<double>(c.bytes));
  }
  succ_.Finish(nn);
  reads_.Close();
  writes_.Close();
  for (int r : reads_.items) ++instances_[r].readers;
  ChargeWork(kPrepareWorkPerInstruction * static_cast<int64_t>(nodes_.size()));
  return absl::OkStatus();
}

}  // namespace quilt::sim_internal
