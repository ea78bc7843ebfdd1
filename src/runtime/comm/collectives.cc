#include "src/runtime/comm/collectives.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// Members of a node send to its first member; the leaders run the ring;
// each leader sends the sum back.
void StartHierarchical(Transport* t, const AllReduceSpec& spec, CommCallback done) {
  std::map<int, std::vector<int>> by_node;  // node → member indices
  for (int m = 0; m < static_cast<int>(spec.ranks.size()); ++m) by_node[spec.nodes[m]].push_back(m);
  const std::vector<int>& mine = by_node[spec.nodes[spec.me]];
  const int leader = mine.front();
  const size_t bytes = static_cast<size_t>(spec.count) * sizeof(float);
  if (spec.me != leader) {
    auto completion = std::make_shared<Completion>(2, std::move(done));
    auto step = [completion, owner = spec.owner](absl::Status s) {
      s.ok() ? completion->One() : completion->Fail(s);
    };
    t->Send(spec.ranks[leader],
            MakeTag(spec.step, TagKind::kGatherToLeader, spec.collective_id, spec.me), spec.data,
            bytes, step);
    t->Recv(spec.ranks[leader],
            MakeTag(spec.step, TagKind::kFromLeader, spec.collective_id, spec.me), spec.data, bytes,
            step);
    return;
  }
  std::vector<int> leader_ranks;
  int me_among_leaders = 0;
  for (const auto& [node, members] : by_node) {
    if (members.front() == spec.me) me_among_leaders = static_cast<int>(leader_ranks.size());
    leader_ranks.push_back(spec.ranks[members.front()]);
  }
  const int others = static_cast<int>(mine.size()) - 1;
  auto buffers = std::make_shared<std::vector<std::vector<float>>>(others);
  auto final_done = std::make_shared<Completion>(1 + others, std::move(done));
  // After the ring: the sum goes back to the node's members.
  auto broadcast = [t, spec, mine, bytes, final_done](absl::Status s) {
    if (!s.ok()) {
      final_done->Fail(s);
      return;
    }
    for (size_t i = 1; i < mine.size(); ++i) {
      t->Send(spec.ranks[mine[i]],
              MakeTag(spec.step, TagKind::kFromLeader, spec.collective_id, mine[i]), spec.data,
              bytes, [final_done, owner = spec.owner](absl::Status st) {
                st.ok() ? final_done->One() : final_done->Fail(st);
              });
    }
    final_done->One();
  };
  auto gathered = std::make_shared<Completion>(
      std::max(1, others),
      [t, spec, buffers, leader_ranks, me_among_leaders, broadcast](absl::Status s) {
        if (!s.ok()) {
          broadcast(s);
          return;
        }
        for (const auto& b : *buffers) {
          AddInto(spec.data, b.data(), spec.count);
        }
        StartRing(t, spec, leader_ranks, me_among_leaders, broadcast);
      });
  if (others == 0) {
    gathered->One();
    return;
  }
  for (int i = 0; i < others; ++i) {
    (*buffers)[i].resize(static_cast<size_t>(spec.count));
    const int member = mine[i + 1];
    t->Recv(spec.ranks[member],
            MakeTag(spec.step, TagKind::kGatherToLeader, spec.collective_id, member),
            (*buffers)[i].data(), bytes, [gathered, buffers, owner = spec.owner](absl::Status s) {
              s.ok() ? gathered->One() : gathered->Fail(s);
            });
  }
}

}  // namespace

void StartAllReduce(Transport* transport, const AllReduceSpec& spec, CommCallback done) {
  if (spec.method == quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE &&
      spec.nodes.size() == spec.ranks.size()) {
    StartHierarchical(transport, spec, std::move(done));
    return;
  }
  if (spec.method == quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE) {
    std::make_shared<Tree>(transport, spec)->Start(std::move(done));
    return;
  }
  StartRing(transport, spec, spec.ranks, spec.me, std::move(done));
}

}  // namespace quilt
