// The lowering's instances and their writers: an instance is rows
// [begin, end) of a tensor on a device (0, 0: the whole tensor), and each
// has the list of instructions that write it, and marks (persistent, fed)
// the lowering sets. Internal to lower.cc.
#ifndef QUILT_SRC_PLANNER_LOWER_WRITERS_H_
#define QUILT_SRC_PLANNER_LOWER_WRITERS_H_

#include <cstdint>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"

namespace quilt {
namespace lower_internal {

// An instance's writers: mostly one or two, kept without an allocation.
using WriterList = absl::InlinedVector<int64_t, 2>;

struct Key {
  int tensor, device;
  int64_t begin, end;
  bool operator<(const Key& o) const {
    return std::tie(tensor, device, begin, end) < std::tie(o.tensor, o.device, o.begin, o.end);
  }
  bool operator==(const Key& o) const {
    return tensor == o.tensor && device == o.device && begin == o.begin && end == o.end;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Key& k) {
    return H::combine(std::move(h), k.tensor, k.device, k.begin, k.end);
  }
};

// Writer lists and marks by instance: references to a list stay valid
// while others are added (lists live in a deque); operator[] adds an empty
// list. The instances of one (tensor, device) form a short chain (a slice,
// the assembled whole), found from a table of chain heads where tensors ×
// devices stay few enough, else from a map (as the simulator finds them).
class WriterLists {
 public:
  WriterLists(int tensors, int devices) : devices_(devices) {
    const int64_t heads = static_cast<int64_t>(tensors) * devices;
    if (heads <= kMaxHeadTable) head_table_.assign(static_cast<size_t>(heads), -1);
  }
  WriterList& operator[](const Key& k) {
    const int e = EntryOf(k);
    entries_[e].marks |= kWritten;
    return lists_[e];
  }
  // k's writers; null when nothing has asked for them.
  const WriterList* Find(const Key& k) const {
    const int e = Existing(k);
    return e >= 0 && (entries_[e].marks & kWritten) ? &lists_[e] : nullptr;
  }
  std::deque<WriterList>& lists() { return lists_; }

  // Marks k (kPersistent or kFed); whether it was not marked so before.
  bool Mark(const Key& k, uint8_t mark) {
    const int e = EntryOf(k);
    if (entries_[e].marks & mark) return false;
    entries_[e].marks |= mark;
    return true;
  }
  bool Marked(const Key& k, uint8_t mark) const {
    const int e = Existing(k);
    return e >= 0 && (entries_[e].marks & mark);
  }
  static constexpr uint8_t kPersistent = 2;
  static constexpr uint8_t kFed = 4;

 private:
  static constexpr int64_t kMaxHeadTable = int64_t{1} << 22;
  static constexpr uint8_t kWritten = 1;  // its list was asked for
  struct Entry {
    int64_t begin, end;
    int next;  // the next instance of the same (tensor, device); -1: none
    uint8_t marks;
  };
  // k's entry, added (with an empty list) when new.
  int EntryOf(const Key& k) {
    int& head = Head(k);
    if (const int e = Walk(head, k); e >= 0) return e;
    entries_.push_back({k.begin, k.end, head, 0});
    head = static_cast<int>(entries_.size()) - 1;
    lists_.emplace_back();
    return head;
  }
  // k's entry; -1 when it has none.
  int Existing(const Key& k) const {
    int head = -1;
    if (!head_table_.empty()) {
      head = head_table_[Slot(k)];
    } else if (auto it = head_map_.find(Slot(k)); it != head_map_.end()) {
      head = it->second;
    }
    return Walk(head, k);
  }
  int64_t Slot(const Key& k) const { return static_cast<int64_t>(k.tensor) * devices_ + k.device; }
  int& Head(const Key& k) {
    if (!head_table_.empty()) return head_table_[Slot(k)];
    return head_map_.emplace(Slot(k), -1).first->second;
  }
  // The entry of k's rows in the chain from `e` (-1: none).
  int Walk(int e, const Key& k) const {
    for (; e >= 0; e = entries_[e].next) {
      if (entries_[e].begin == k.begin && entries_[e].end == k.end) return e;
    }
    return -1;
  }
  int devices_;
  std::vector<int> head_table_;
  absl::flat_hash_map<int64_t, int> head_map_;
  std::vector<Entry> entries_;  // by list
  std::deque<WriterList> lists_;
};

}  // namespace lower_internal
}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_LOWER_WRITERS_H_
