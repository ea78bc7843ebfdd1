#include "src/runtime/comm/collectives.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/common/hierarchical_layout.h"
#include "src/runtime/comm/tags.h"

namespace quilt {
namespace {

// dst[i] += src[i]: the buffers never overlap, which lets the compiler
// vectorize the loop (it would not, not knowing).
void AddInto(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Finishes once: the first error, or OK when `remaining` reaches zero.
class Completion {
 public:
  Completion(int remaining, CommCallback done) : remaining_(remaining), done_(std::move(done)) {}
  void Fail(const absl::Status& s) {
    CommCallback done;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      done = std::move(done_);
    }
    done(s);
  }
  void One() {
    CommCallback done;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || --remaining_ > 0) return;
      finished_ = true;
      done = std::move(done_);
    }
    done(absl::OkStatus());
  }
  bool failed() {
    absl::MutexLock lock(&mu_);
    return finished_ && remaining_ > 0;
  }

 private:
  absl::Mutex mu_;
  int remaining_;
  bool finished_ = false;
  CommCallback done_;
};

// Receive buffers of finished rings, kept for the next ones: fresh memory
// for every all-reduce costs a page fault per page inside the copy.
class BufferPool {
 public:
  static BufferPool& Get() {
    static BufferPool* pool = new BufferPool;
    return *pool;
  }
  std::vector<float> Take() {
    absl::MutexLock lock(&mu_);
    if (free_.empty()) return {};
    std::vector<float> v = std::move(free_.back());
    free_.pop_back();
    return v;
  }
  void Give(std::vector<float> v) {
    absl::MutexLock lock(&mu_);
    if (free_.size() < 64 && v.capacity() > 0) free_.push_back(std::move(v));
  }

 private:
  absl::Mutex mu_;
  std::vector<std::vector<float>> free_ ABSL_GUARDED_BY(mu_);
};

// The ring over `ranks` (member `me`) on data[0, count).
class Ring : public std::enable_shared_from_this<Ring> {
 public:
  Ring(Transport* t, uint64_t id, int64_t step, std::vector<int> ranks, int me, float* data,
       int64_t count, int64_t segment_elements, std::shared_ptr<const void> owner)
      : t_(t),
        id_(id),
        step_(step),
        ranks_(std::move(ranks)),
        me_(me),
        data_(data),
        count_(count),
        owner_(std::move(owner)) {
    n_ = static_cast<int>(ranks_.size());
    int64_t longest = 0;
    for (int c = 0; c < n_; ++c) longest = std::max(longest, ChunkBegin(c + 1) - ChunkBegin(c));
    segments_ = static_cast<int>(std::clamp<int64_t>(
        (longest + segment_elements - 1) / std::max<int64_t>(1, segment_elements), 1, 255));
  }

  ~Ring() {
    for (auto& v : temp_) BufferPool::Get().Give(std::move(v));
  }

  void Start(CommCallback done) {
    if (n_ < 2 || count_ == 0) {
      done(absl::OkStatus());
      return;
    }
    completion_ = std::make_shared<Completion>(segments_, std::move(done));
    temp_.resize(segments_);
    for (auto& v : temp_) v = BufferPool::Get().Take();
    for (int s = 0; s < segments_; ++s) Step(s, 0);
  }

 private:
  int64_t ChunkBegin(int c) const { return count_ * c / n_; }
  // Elements [begin, end) of segment s of chunk c.
  std::pair<int64_t, int64_t> Segment(int c, int s) const {
    const int64_t b = ChunkBegin(c), len = ChunkBegin(c + 1) - b;
    return {b + len * s / segments_, b + len * (s + 1) / segments_};
  }
  static int Mod(int a, int n) { return ((a % n) + n) % n; }

  // Step k of segment s: 0..n-2 reduce-scatter, n-1..2n-3 all-gather.
  void Step(int s, int k) {
    if (completion_->failed()) return;
    if (k == 2 * (n_ - 1)) {
      completion_->One();
      return;
    }
    const bool gather = k >= n_ - 1;
    const int j = gather ? k - (n_ - 1) : k;
    const int send_chunk = gather ? Mod(me_ + 1 - j, n_) : Mod(me_ - j, n_);
    const int recv_chunk = gather ? Mod(me_ - j, n_) : Mod(me_ - j - 1, n_);
    const TagKind kind = gather ? TagKind::kAllGather : TagKind::kReduceScatter;
    const int right = Mod(me_ + 1, n_), left = Mod(me_ - 1, n_);
    const auto [sb, se] = Segment(send_chunk, s);
    const auto [rb, re] = Segment(recv_chunk, s);
    float* into = data_ + rb;
    if (!gather) {
      temp_[s].resize(static_cast<size_t>(re - rb));
      into = temp_[s].data();
    }
    auto self = shared_from_this();
    auto pending = std::make_shared<std::atomic<int>>(2);
    auto after = [self, s, k, rb, re, gather, pending](absl::Status st) {
      if (!st.ok()) {
        self->completion_->Fail(st);
        return;
      }
      if (--*pending > 0) return;
      if (!gather) {
        const float* add = self->temp_[s].data();
        float* dst = self->data_ + rb;
        AddInto(dst, add, re - rb);
      }
      self->Step(s, k + 1);
    };
    t_->Recv(ranks_[left], MakeTag(step_, kind, id_, CollectiveSub(j, s, me_)), into,
             static_cast<size_t>(re - rb) * sizeof(float), after);
    t_->Send(ranks_[right], MakeTag(step_, kind, id_, CollectiveSub(j, s, right)), data_ + sb,
             static_cast<size_t>(se - sb) * sizeof(float), after);
  }

  Transport* t_;
  uint64_t id_;
  int64_t step_;
  std::vector<int> ranks_;
  int me_, n_ = 0, segments_ = 1;
  float* data_;
  int64_t count_;
  std::shared_ptr<const void> owner_;  // of data_, while any operation is pending
  std::vector<std::vector<float>> temp_;
  std::shared_ptr<Completion> completion_;
};

void StartRing(Transport* t, const AllReduceSpec& spec, std::vector<int> ranks, int me,
               CommCallback done) {
  auto ring = std::make_shared<Ring>(t, spec.collective_id, spec.step, std::move(ranks), me,
                                     spec.data, spec.count, spec.segment_elements, spec.owner);
  ring->Start(std::move(done));
}

// Binary tree over the members: each waits for its children's sums, adds
// them, sends the result to its parent and receives the total back, then
// sends the total to its children.
class Tree : public std::enable_shared_from_this<Tree> {
 public:
  Tree(Transport* t, const AllReduceSpec& spec)
      : t_(t), spec_(spec), n_(static_cast<int>(spec.ranks.size())) {
    for (int c : {2 * spec.me + 1, 2 * spec.me + 2}) {
      if (c < n_) children_.push_back(c);
    }
  }

  ~Tree() {
    for (auto& v : from_children_) BufferPool::Get().Give(std::move(v));
  }

  void Start(CommCallback done) {
    if (n_ < 2 || spec_.count == 0) {
      done(absl::OkStatus());
      return;
    }
    // Done when the total is here and every child has been sent it.
    completion_ =
        std::make_shared<Completion>(1 + static_cast<int>(children_.size()), std::move(done));
    if (children_.empty()) {
      Up();
      return;
    }
    auto self = shared_from_this();
    auto pending = std::make_shared<std::atomic<int>>(static_cast<int>(children_.size()));
    from_children_.resize(children_.size());
    for (size_t i = 0; i < children_.size(); ++i) {
      from_children_[i] = BufferPool::Get().Take();
      from_children_[i].resize(static_cast<size_t>(spec_.count));
      t_->Recv(spec_.ranks[children_[i]], Tag(TagKind::kTreeUp, children_[i]),
               from_children_[i].data(), Bytes(), [self, pending](absl::Status s) {
                 if (!s.ok()) {
                   self->completion_->Fail(s);
                   return;
                 }
                 if (--*pending == 0) self->Up();
               });
    }
  }

 private:
  uint64_t Tag(TagKind kind, int child) const {
    return MakeTag(spec_.step, kind, spec_.collective_id, static_cast<uint64_t>(child));
  }
  size_t Bytes() const { return static_cast<size_t>(spec_.count) * sizeof(float); }

  // The children's sums are here: add them; the root has the total, the
  // others send theirs up and wait for it.
  void Up() {
    if (completion_->failed()) return;
    for (const auto& v : from_children_) {
      AddInto(spec_.data, v.data(), spec_.count);
    }
    if (spec_.me == 0) {
      Down();
      return;
    }
    auto self = shared_from_this();
    const int parent = (spec_.me - 1) / 2;
    // The total overwrites the buffer: receive it only once ours has left.
    t_->Send(spec_.ranks[parent], Tag(TagKind::kTreeUp, spec_.me), spec_.data, Bytes(),
             [self, parent](absl::Status s) {
               if (!s.ok()) {
                 self->completion_->Fail(s);
                 return;
               }
               self->t_->Recv(self->spec_.ranks[parent],
                              self->Tag(TagKind::kTreeDown, self->spec_.me), self->spec_.data,
                              self->Bytes(), [self](absl::Status st) {
                                if (!st.ok()) {
                                  self->completion_->Fail(st);
                                  return;
                                }
                                self->Down();
                              });
             });
  }

  void Down() {
    if (completion_->failed()) return;
    auto self = shared_from_this();
    for (int c : children_) {
      t_->Send(spec_.ranks[c], Tag(TagKind::kTreeDown, c), spec_.data, Bytes(),
               [self](absl::Status s) {
                 s.ok() ? self->completion_->One() : self->completion_->Fail(s);
               });
    }
    completion_->One();
  }

  Transport* t_;
  AllReduceSpec spec_;
  int n_;
  std::vector<int> children_;
  std::vector<std::vector<float>> from_children_;
  std::shared_ptr<Completion> completion_;
};

// The two-level all-reduce (src/common/hierarchical_layout.h): per piece
// of the buffer, every member of a node sends each shard to the node's
// member that owns it (member j of the node owns shard j), the owners of
// each shard exchange it across the nodes (each sums its node's part of
// it, then sends that sum to the others), and each owner sends its shard's
// sum to the other members of its node. Pieces proceed independently, so
// one piece's exchange overlaps the next one's sums within the nodes.
class Hierarchical : public std::enable_shared_from_this<Hierarchical> {
 public:
  Hierarchical(Transport* t, const AllReduceSpec& spec) : t_(t), spec_(spec) {
    std::map<int, std::vector<int>> by_node;  // node → member indices
    for (int m = 0; m < static_cast<int>(spec.ranks.size()); ++m) {
      by_node[spec.nodes[m]].push_back(m);
    }
    int min_members = static_cast<int>(spec.ranks.size());
    for (const auto& [node, members] : by_node) {
      if (node == spec.nodes[spec.me]) node_index_ = static_cast<int>(nodes_.size());
      nodes_.push_back(members);
      min_members = std::min(min_members, static_cast<int>(members.size()));
    }
    layout_ = LayoutHierarchical(static_cast<int>(nodes_.size()), min_members, spec.count);
    if (spec.node_bytes_per_s.size() == spec.ranks.size()) {
      // (A node's first member's figure: every process reads the same one.)
      std::vector<double> bandwidth;
      for (const std::vector<int>& members : nodes_)
        bandwidth.push_back(spec.node_bytes_per_s[members[0]]);
      shares_ = ExchangeShares(bandwidth, layout_.pieces);
    }
    scattered_ = std::make_unique<std::atomic<int>[]>(layout_.pieces);
    const std::vector<int>& mine = nodes_[node_index_];
    position_ = static_cast<int>(std::find(mine.begin(), mine.end(), spec.me) - mine.begin());
  }

  ~Hierarchical() {
    for (auto& v : temp_) BufferPool::Get().Give(std::move(v));
    for (auto& v : across_) BufferPool::Get().Give(std::move(v));
  }

  void Start(CommCallback done) {
    if (spec_.ranks.size() < 2 || spec_.count == 0) {
      done(absl::OkStatus());
      return;
    }
    // An owner's piece is done twice: its sums sent, the others' received.
    completion_ = std::make_shared<Completion>(layout_.pieces * (owner() ? 2 : 1), std::move(done));
    if (owner()) {
      temp_.resize(static_cast<size_t>(layout_.pieces) * (Mine().size() - 1));
      across_.resize(static_cast<size_t>(layout_.pieces) * (nodes_.size() - 1));
    }
    for (int p = 0; p < layout_.pieces; ++p) Reduce(p);
  }

 private:
  const std::vector<int>& Mine() const { return nodes_[node_index_]; }
  bool owner() const { return position_ < layout_.shards; }
  // Elements [begin, end) of shard j of piece p (empty ones are not sent).
  std::pair<int64_t, int64_t> Shard(int p, int j) const {
    const int64_t pb = spec_.count * p / layout_.pieces;
    const int64_t len = spec_.count * (p + 1) / layout_.pieces - pb;
    return {pb + len * j / layout_.shards, pb + len * (j + 1) / layout_.shards};
  }
  size_t Bytes(int p, int j) const {
    const auto [b, e] = Shard(p, j);
    return static_cast<size_t>(e - b) * sizeof(float);
  }
  // Positions within the node: unique among the members a process hosts.
  uint64_t Tag(TagKind kind, int sender_position, int p, int receiver_position) const {
    return MakeTag(spec_.step, kind, spec_.collective_id,
                   CollectiveSub(sender_position, p, receiver_position));
  }
  std::vector<float>& Temp(int p, int k) { return temp_[p * (Mine().size() - 1) + (k - 1)]; }
  // The k-th other node's part of this owner's shard of piece p, received.
  std::vector<float>& Across(int p, int k) { return across_[p * (nodes_.size() - 1) + k]; }
  // Elements [begin, end) of node k's part of this owner's shard of piece p.
  std::pair<int64_t, int64_t> Part(int p, int k) const {
    const auto [b, e] = Shard(p, position_);
    const int n = static_cast<int>(nodes_.size());
    return {b + ShareBegin(shares_, k, n, e - b), b + ShareBegin(shares_, k + 1, n, e - b)};
  }
  // The process of node k's owner of this member's shard.
  int OwnerRank(int k) const { return spec_.ranks[nodes_[k][position_]]; }
  // A message of the exchange across nodes of piece p, sent by node k's
  // owner of this member's shard (tags within a process: per receiving
  // owner, per sender).
  uint64_t AcrossTag(TagKind kind, int p, int k) const {
    const uint64_t sub =
        (static_cast<uint64_t>(p) * layout_.shards + position_) * nodes_.size() + k;
    return MakeTag(spec_.step, kind, spec_.collective_id, sub);
  }
  // A callback for `operations` operations that runs `then` once all have
  // succeeded (at once when there are none), or fails the all-reduce.
  CommCallback Count(int operations, std::function<void()> then) {
    auto self = shared_from_this();
    auto pending = std::make_shared<std::atomic<int>>(operations + 1);
    CommCallback cb = [self, pending, then = std::move(then)](absl::Status s) {
      if (!s.ok()) {
        self->completion_->Fail(s);
        return;
      }
      if (--*pending == 0) then();
    };
    return cb;
  }

  // Phase 1 of piece p: the shards this member does not own go to their
  // owners; an owner sums its shard from the others, then exchanges it
  // across the nodes.
  void Reduce(int p) {
    if (completion_->failed()) return;
    const std::vector<int>& mine = Mine();
    const int g = static_cast<int>(mine.size());
    auto self = shared_from_this();
    // The sums sent back overwrite the shards sent: they are received only
    // once those have left.
    int sends = 0;
    for (int j = 0; j < layout_.shards; ++j) sends += j != position_ && Bytes(p, j) > 0;
    CommCallback on_sent = Count(sends, [self, p] { self->ReceiveSums(p); });
    for (int j = 0; j < layout_.shards; ++j) {
      if (j == position_ || Bytes(p, j) == 0) continue;
      t_->Send(spec_.ranks[mine[j]], Tag(TagKind::kGatherToLeader, position_, p, j),
               spec_.data + Shard(p, j).first, Bytes(p, j), on_sent);
    }
    on_sent(absl::OkStatus());
    if (!owner()) return;
    const auto [b, e] = Shard(p, position_);
    const int receives = e > b ? g - 1 : 0;
    CommCallback on_received = Count(receives, [self, p, receives, b = b, e = e] {
      for (int k = 1; k <= receives; ++k) {
        AddInto(self->spec_.data + b, self->Temp(p, k).data(), e - b);
      }
      self->Exchange(p);
    });
    for (int k = 1; k <= receives; ++k) {
      const int from = (position_ + k) % g;
      std::vector<float>& into = Temp(p, k);
      into = BufferPool::Get().Take();
      into.resize(static_cast<size_t>(e - b));
      t_->Recv(spec_.ranks[mine[from]], Tag(TagKind::kGatherToLeader, from, p, position_),
               into.data(), Bytes(p, position_), on_received);
    }
    on_received(absl::OkStatus());
  }

  // Phase 2: the owners of this shard, one per node, exchange it: each
  // sends every other node its part of the shard and sums its own node's
  // part from theirs (reduce-scatter), then sends that sum to them all and
  // receives their parts' sums (all-gather).
  void Exchange(int p) {
    if (completion_->failed()) return;
    const int nodes = static_cast<int>(nodes_.size());
    auto self = shared_from_this();
    const auto [b, e] = Part(p, node_index_);
    int sends = 0, receives = 0;
    for (int l = 0; l < nodes; ++l) {
      if (l == node_index_) continue;
      const auto [lb, le] = Part(p, l);
      sends += le > lb;
      receives += e > b;
    }
    // The parts' sums received in the all-gather overwrite the parts sent
    // here: they are received only once those have left.
    CommCallback on_sent = Count(sends, [self, p] { self->Arrived(p); });
    for (int l = 0; l < nodes; ++l) {
      if (l == node_index_) continue;
      const auto [lb, le] = Part(p, l);
      if (le == lb) continue;
      t_->Send(OwnerRank(l), AcrossTag(TagKind::kAcrossScatter, p, node_index_), spec_.data + lb,
               static_cast<size_t>(le - lb) * sizeof(float), on_sent);
    }
    on_sent(absl::OkStatus());
    CommCallback on_received = Count(receives, [self, p, b = b, e = e] {
      for (int k = 0; k + 1 < static_cast<int>(self->nodes_.size()) && e > b; ++k) {
        AddInto(self->spec_.data + b, self->Across(p, k).data(), e - b);
      }
      self->Arrived(p);
    });
    for (int l = 0, k = 0; l < nodes && e > b; ++l) {
      if (l == node_index_) continue;
      std::vector<float>& into = Across(p, k++);
      into = BufferPool::Get().Take();
      into.resize(static_cast<size_t>(e - b));
      t_->Recv(OwnerRank(l), AcrossTag(TagKind::kAcrossScatter, p, l), into.data(),
               static_cast<size_t>(e - b) * sizeof(float), on_received);
    }
    on_received(absl::OkStatus());
  }

  // The reduce-scatter of piece p has sent its parts or summed this
  // node's: after both, the all-gather.
  void Arrived(int p) {
    if (++scattered_[p] == 2) Gather(p);
  }

  void Gather(int p) {
    if (completion_->failed()) return;
    const int nodes = static_cast<int>(nodes_.size());
    auto self = shared_from_this();
    const auto [b, e] = Part(p, node_index_);
    int operations = 0;
    for (int l = 0; l < nodes; ++l) {
      if (l == node_index_) continue;
      const auto [lb, le] = Part(p, l);
      operations += (e > b) + (le > lb);
    }
    CommCallback on_done = Count(operations, [self, p] { self->SendSum(p); });
    for (int l = 0; l < nodes; ++l) {
      if (l == node_index_) continue;
      const auto [lb, le] = Part(p, l);
      if (le > lb) {
        t_->Recv(OwnerRank(l), AcrossTag(TagKind::kAcrossGather, p, l), spec_.data + lb,
                 static_cast<size_t>(le - lb) * sizeof(float), on_done);
      }
      if (e > b) {
        t_->Send(OwnerRank(l), AcrossTag(TagKind::kAcrossGather, p, node_index_), spec_.data + b,
                 static_cast<size_t>(e - b) * sizeof(float), on_done);
      }
    }
    on_done(absl::OkStatus());
  }

  // Phase 3, an owner: its shard's sum to the other members of its node.
  void SendSum(int p) {
    if (completion_->failed()) return;
    const std::vector<int>& mine = Mine();
    const size_t bytes = Bytes(p, position_);
    const int sends = bytes > 0 ? static_cast<int>(mine.size()) - 1 : 0;
    auto self = shared_from_this();
    CommCallback on_sent = Count(sends, [self] { self->completion_->One(); });
    for (size_t k = 0; sends > 0 && k < mine.size(); ++k) {
      if (static_cast<int>(k) == position_) continue;
      t_->Send(spec_.ranks[mine[k]], Tag(TagKind::kFromLeader, position_, p, static_cast<int>(k)),
               spec_.data + Shard(p, position_).first, bytes, on_sent);
    }
    on_sent(absl::OkStatus());
  }

  // Phase 3, every member: the sums of the shards it does not own.
  void ReceiveSums(int p) {
    if (completion_->failed()) return;
    const std::vector<int>& mine = Mine();
    int receives = 0;
    for (int j = 0; j < layout_.shards; ++j) receives += j != position_ && Bytes(p, j) > 0;
    auto self = shared_from_this();
    CommCallback on_received = Count(receives, [self] { self->completion_->One(); });
    for (int j = 0; j < layout_.shards; ++j) {
      if (j == position_ || Bytes(p, j) == 0) continue;
      t_->Recv(spec_.ranks[mine[j]], Tag(TagKind::kFromLeader, j, p, position_),
               spec_.data + Shard(p, j).first, Bytes(p, j), on_received);
    }
    on_received(absl::OkStatus());
  }

  Transport* t_;
  AllReduceSpec spec_;
  std::vector<std::vector<int>> nodes_;  // member indices per node, by node
  int node_index_ = 0, position_ = 0;
  HierarchicalLayout layout_;
  std::vector<double> shares_;              // per node, its part of a shard (empty: equal)
  std::vector<std::vector<float>> temp_;    // per piece, the other members' shards
  std::vector<std::vector<float>> across_;  // per piece, the other nodes' parts
  // Per piece, the reduce-scatter's halves done (parts sent, own part summed).
  std::unique_ptr<std::atomic<int>[]> scattered_;
  std::shared_ptr<Completion> completion_;
};

// The direct all-reduce: every member sends its buffer to every other
// member, receives theirs, and adds them up in member order, so that every
// member computes the same sum. Tags name (sender, receiver) members.
constexpr int kDirectMaxMembers = 4096;
class Direct : public std::enable_shared_from_this<Direct> {
 public:
  Direct(Transport* t, const AllReduceSpec& spec) : t_(t), spec_(spec) {}
  ~Direct() {
    for (auto& v : from_) BufferPool::Get().Give(std::move(v));
  }

  void Start(CommCallback done) {
    const int n = static_cast<int>(spec_.ranks.size());
    if (n < 2 || spec_.count == 0) {
      done(absl::OkStatus());
      return;
    }
    if (n > kDirectMaxMembers) {  // (their tags would not fit)
      done(absl::InvalidArgumentError(absl::StrCat(
          "a direct all-reduce over ", n, " members; it takes at most ", kDirectMaxMembers)));
      return;
    }
    auto self = shared_from_this();
    completion_ = std::make_shared<Completion>(1, std::move(done));
    // The sum overwrites the buffer: only after every send has left.
    auto pending = std::make_shared<std::atomic<int>>(2 * (n - 1) + 1);
    CommCallback cb = [self, pending](absl::Status s) {
      if (!s.ok()) {
        self->completion_->Fail(s);
        return;
      }
      if (--*pending == 0) self->Sum();
    };
    const size_t bytes = static_cast<size_t>(spec_.count) * sizeof(float);
    from_.resize(n);
    for (int m = 0; m < n; ++m) {
      if (m == spec_.me) continue;
      t_->Send(spec_.ranks[m], Tag(spec_.me, m), spec_.data, bytes, cb);
      std::vector<float>& into = from_[m];
      into = BufferPool::Get().Take();
      into.resize(static_cast<size_t>(spec_.count));
      t_->Recv(spec_.ranks[m], Tag(m, spec_.me), into.data(), bytes, cb);
    }
    cb(absl::OkStatus());
  }

 private:
  uint64_t Tag(int from, int to) const {
    return MakeTag(spec_.step, TagKind::kDirect, spec_.collective_id,
                   static_cast<uint64_t>(from) * spec_.ranks.size() + to);
  }
  void Sum() {
    if (completion_->failed()) return;
    const int n = static_cast<int>(spec_.ranks.size());
    // Member 0's buffer first, then each in turn: the same additions in
    // the same order on every member (into member 0's received buffer,
    // then copied, where this member is another).
    float* sum = spec_.me == 0 ? spec_.data : from_[0].data();
    for (int m = 1; m < n; ++m) {
      AddInto(sum, m == spec_.me ? spec_.data : from_[m].data(), spec_.count);
    }
    if (sum != spec_.data) std::copy(sum, sum + spec_.count, spec_.data);
    completion_->One();
  }

  Transport* t_;
  AllReduceSpec spec_;
  std::vector<std::vector<float>> from_;  // per other member, its buffer
  std::shared_ptr<Completion> completion_;
};

void StartHierarchical(Transport* t, const AllReduceSpec& spec, CommCallback done) {
  std::make_shared<Hierarchical>(t, spec)->Start(std::move(done));
}

}  // namespace

void StartAllReduce(Transport* transport, const AllReduceSpec& spec, CommCallback done) {
  if (spec.method == quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE &&
      spec.nodes.size() == spec.ranks.size()) {
    StartHierarchical(transport, spec, std::move(done));
    return;
  }
  if (spec.method == quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE) {
    std::make_shared<Direct>(transport, spec)->Start(std::move(done));
    return;
  }
  if (spec.method == quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE) {
    std::make_shared<Tree>(transport, spec)->Start(std::move(done));
    return;
  }
  StartRing(transport, spec, spec.ranks, spec.me, std::move(done));
}

}  // namespace quilt
