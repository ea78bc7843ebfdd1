// Internal to the simulator: the prepared form of a program (nodes with
// durations, flat dependency / read / write lists, tensor instances,
// collectives) and the replay state. sim_build.cc prepares it from a
// DistributedProgram; simulator.cc replays it.
#ifndef QUILT_SRC_SIM_SIM_STATE_H_
#define QUILT_SRC_SIM_SIM_STATE_H_

#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/graph/graph_index.h"
#include "src/sim/ready_queues.h"
#include "src/sim/simulator.h"

namespace quilt::sim_internal {

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
  // Buffers the executor holds beside the tensor instances until the node
  // completes: an all-reduce member's staging buffer (from when it is
  // ready), an accumulate's receive buffers, one per push (from when its
  // own dependencies are done: the executor posts the receives then).
  int64_t scratch = 0;
  int local_deps = 0;  // an accumulate's dependencies not done yet
  bool scratch_held = false;
  bool accumulate = false;  // a parameter server's accumulate
  bool comm() const { return kind != Kind::kCompute && kind != Kind::kLocal; }
};

// Flat per-node lists: list n is items[begin[n], begin[n + 1]). Built
// either in any order (Add, then Finish) or node by node in ascending order
// (Open each node, Append its items, Close after the last: no sorting).
struct NodeLists {
  std::vector<std::pair<int, int>> pairs;
  std::vector<int> begin, items;
  void Add(int node, int item) { pairs.push_back({node, item}); }
  void Open() { begin.push_back(static_cast<int>(items.size())); }
  void Append(int item) { items.push_back(item); }
  void Close() { Open(); }
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
  int64_t writer = -1;  // the instruction id of its last writer in the program (-1: none)
  int64_t begin = 0, end = 0;
  int device = 0;
  int next_same = -1;  // next instance of the same tensor on the same device
  int readers = 0;
  bool persistent = false;
  bool allocated = false;
  bool freed = false;
};

// Communications over the same links waiting for them.
struct PathWaiters {
  const std::vector<int>* links = nullptr;  // the whole path
  // The links it registers with itself: a transfer's two ends (its
  // devices' ports) where the path has links between them (its trunk),
  // else every link.
  std::vector<int> own;
  int trunk = -1;
  std::priority_queue<std::pair<double, int>> waiting;  // (priority, -node)
  // While registered: its entry's place in the list of each of its own
  // links, and its place among its trunk's members.
  std::vector<int> place;
  int member_place = -1;
  // A pair class's bucket in the list of each of its own links (fixed once
  // made: buckets are kept across replays).
  std::vector<int> bucket;
};

// The links between the ends of transfers' paths (the NICs of two nodes):
// the classes of transfers between the same two nodes share one, which
// registers with those links while any of them has waiters. A NIC's state
// change then visits the node pairs with waiters, not every device pair.
struct Trunk {
  std::vector<int> links;
  std::vector<int> place;  // per link: its entry's place in that link's list
  // Its registered classes (pair classes all: their own links beside
  // them, read when the trunk frees).
  struct Member {
    int cls, own0, own1;
    std::pair<double, int> top;  // ClassState::top, kept in step (SetTop)
  };
  std::vector<Member> members;
  // At least every member's top (raised by SetTop, made exact where a
  // scan reads them all): a trunk under the best class found so far is
  // passed over.
  std::pair<double, int> max_top{-std::numeric_limits<double>::infinity(), 0};
  int busy = 0;  // busy links, while it has members
};

// What freeing and taking links checks of a class, kept apart from its
// queue (dense: a link's list of classes is scanned at every change).
// A class of at most two own links (a transfer's: its two ports, or an
// intra-node path) is a pair class: its links are checked where asked,
// not counted (a port's list holds a class per peer: hundreds of parameter
// servers' pushes on large clusters, each counted at every change of the
// port cost a cache miss).
struct ClassState {
  bool live = false;           // registered: it has waiters, and is in its links' lists
  bool pair = false;           // a pair class (at most two own links)
  int busy = 0;                // busy own links, while registered (counted classes)
  int trunk = -1;              // PathWaiters::trunk
  std::pair<double, int> top;  // its best waiter (priority, -node), while registered
};

// A registered class (or trunk) in a link's list: the class, and which of
// its links the list is (its place there is PathWaiters::place[slot]).
struct LinkEntry {
  int cls, slot;
};

// A registered pair class in the list of one of its own links (in its
// trunk's bucket there): also its other own link (-1: none), so that a
// scan of the list reads nothing else of it unless it can start.
struct PairEntry {
  int cls, slot, other;
  std::pair<double, int> top;  // ClassState::top, kept in step (SetTop)
};

// A link's registered pair classes of one trunk (-1: none): a scan passes
// over a busy trunk's bucket whole (on 50 nodes of 8 devices, a port's
// parameter-server classes to the devices of 49 other nodes, most behind
// busy NICs).
struct PairBucket {
  int trunk = -1;
  std::vector<PairEntry> entries;
};

// A class FreeLinks found startable: what its checks and choice read.
struct Candidate {
  std::pair<double, int> top;
  int cls;
  int own0 = -1, own1 = -1, trunk = -1;  // a pair class's
  bool counted = false;                  // checked by its ClassState instead
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
  // A copy of a built simulator replays on its own (PreparedProgram). It
  // shares the index: one built by Build (no SimOptions::index) stays the
  // original's, which must outlive the copy.
  Sim(const Sim&) = default;
  // Prepares and replays.
  absl::StatusOr<SimResult> Run();
  absl::Status Build();
  // Replays a built simulator (once: it consumes its state);
  // `prepare_wall_s` goes into the result.
  absl::StatusOr<SimResult> Replay(double prepare_wall_s);
  std::vector<double>& priorities() { return priority_; }

 private:
  // `hint`: an index the program gives (TensorRange.tensor_index; -1: none).
  absl::StatusOr<int> TensorId(const std::string& name, int hint = -1) const;
  // A push to (or pull from) `server_device` of `bytes` by `node` (its
  // device set): its path and duration, its bytes counted.
  absl::Status ServerTransfer(const std::string& server_device, int64_t bytes, bool to_server,
                              Node* node);
  int InstanceFor(int tensor, int device, int64_t begin, int64_t end);
  // The instance a read of rows [begin, end) (0, 0: whole) of `tensor` on
  // `device` by an instruction with dependencies `deps` finds: the exact
  // one; else, of those that hold the rows, the one created latest that is
  // resident, fed or written by a dependency, else the one created latest
  // (-1: none).
  int Containing(int tensor, int device, int64_t begin, int64_t end,
                 const google::protobuf::RepeatedField<int64_t>* deps = nullptr);
  const std::vector<int>& Links(int n) const;
  std::string Label(int n) const;
  void Ready(int n);
  int PathClass(int n);
  // Sets registered class c's best waiter from its queue (and in its
  // pair entries and trunk membership).
  void SetTop(int c);
  // The best class of link r's lists whose links are all free, into
  // `best`; false where none is.
  bool BestOf(int r, Candidate* best);
  // Whether a candidate can start now.
  bool CanStart(const Candidate& k) const {
    if (k.counted) return Startable(k.cls);
    return (k.own0 < 0 || !link_busy_[k.own0]) && (k.own1 < 0 || !link_busy_[k.own1]) &&
           (k.trunk < 0 || trunks_[k.trunk].busy == 0);
  }
  // Appends the state of a new class with links `w`.
  void NewClassState(const PathWaiters& w);
  void TryStartComm(int n);
  // Enters class c in the lists of its links, or takes it out of them.
  void Register(int c);
  void Unregister(int c);
  // A registered class whose links are all free.
  bool Startable(int c) const {
    const ClassState& s = class_state_[c];
    return s.live && s.busy == 0 && (s.trunk < 0 || trunks_[s.trunk].busy == 0);
  }
  void FreeLinks(int n);
  void Start(int n);
  void Complete(int n);
  void Dispatch(int device);
  void Alloc(int inst);
  void Release(int inst);
  void HoldScratch(int n);
  void DropScratch(int n);

  const quilt::v1::DistributedProgram& prog_;
  const Graph& g_;
  const Topology& topo_;
  const CostModel& cost_;
  const SimOptions& opt_;

  // The graph's index: the caller's (SimOptions::index) or built by Build.
  const GraphIndex* ix_ = nullptr;
  std::optional<GraphIndex> own_index_;
  // Per tensor: bytes per batch row (or per row of dim 0) and whole bytes.
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
  // First instance of (tensor, device), key tensor · devices + device (-1:
  // none): a table when the keys are few enough, else a map.
  static constexpr int64_t kMaxHeadTable = int64_t{1} << 22;
  std::vector<int> head_table_;
  absl::flat_hash_map<int64_t, int> head_map_;
  int& FirstInstance(int tensor, int device) {
    const int64_t key = static_cast<int64_t>(tensor) * num_devices_ + device;
    if (!head_table_.empty()) return head_table_[key];
    return HeadInMap(key);
  }
  int& HeadInMap(int64_t key);
  int num_devices_ = 0;
  std::vector<int> feeds_;

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t seq_ = 0;
  double now_ = 0;
  ReadyQueues ready_;
  std::vector<bool> busy_, dirty_;
  std::vector<int> dirty_list_;
  std::vector<bool> link_busy_;
  // Communications waiting for links, by path class (link_waits.cc): the
  // classes, their ids by path, per link the classes with waiters that use
  // it, and the classes whose links all freed at once.
  std::vector<PathWaiters> classes_;
  std::vector<ClassState> class_state_;  // by class
  absl::flat_hash_map<int64_t, int> class_ids_;
  // Collectives over the same links share a class (per collective, lazily).
  std::vector<int> collective_class_;
  absl::flat_hash_map<std::vector<int>, int> link_set_class_;
  std::vector<std::vector<LinkEntry>> link_classes_;  // counted classes
  std::vector<std::vector<PairBucket>> link_pairs_;   // pair classes, by trunk
  // Trunks by their links, and per link the trunks with waiters using it.
  std::vector<Trunk> trunks_;
  absl::flat_hash_map<std::vector<int>, int> trunk_ids_;
  std::vector<std::vector<LinkEntry>> link_trunks_;
  // FreeLinks's: per freed link, the best class of its lists that can
  // start, and whether it has one.
  std::vector<Candidate> startable_;
  std::vector<bool> freed_live_;
  std::vector<int64_t> live_, peak_;
  std::vector<double> busy_s_, link_busy_s_;
  // Per node (its process's transport): when its latest transfer ends
  // (-inf before the first).
  std::vector<double> comm_end_;
  std::vector<std::vector<std::pair<double, double>>> compute_iv_, comm_iv_;
  int64_t comm_bytes_ = 0;
  int64_t event_count_ = 0;
  std::vector<TraceEvent> trace_;
};

}  // namespace quilt::sim_internal

#endif  // QUILT_SRC_SIM_SIM_STATE_H_
