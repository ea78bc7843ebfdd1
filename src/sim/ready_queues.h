// The simulator's per-device queues of instructions ready to compute: the
// highest priority first, ties to the lower node index. The nodes that can
// enter a device's queue are ranked once per replay (sorted by priority);
// a queue is then a bitset over its device's ranks, so that readying a node
// sets a bit and taking the best finds the lowest set bit.
#ifndef QUILT_SRC_SIM_READY_QUEUES_H_
#define QUILT_SRC_SIM_READY_QUEUES_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace quilt::sim_internal {

class ReadyQueues {
 public:
  // `device_of(n)`: node n's device, or -1 for a node that never queues.
  template <typename DeviceOf>
  void Rank(int devices, const std::vector<double>& priority, DeviceOf device_of) {
    const int nodes = static_cast<int>(priority.size());
    std::vector<int> count(devices + 1, 0);
    for (int n = 0; n < nodes; ++n) {
      const int d = device_of(n);
      if (d >= 0) ++count[d + 1];
    }
    node_begin_.assign(devices + 1, 0);
    word_begin_.assign(devices + 1, 0);
    for (int d = 0; d < devices; ++d) {
      node_begin_[d + 1] = node_begin_[d] + count[d + 1];
      word_begin_[d + 1] = word_begin_[d] + (count[d + 1] + 63) / 64;
    }
    std::vector<std::pair<double, int>> keyed(node_begin_[devices]);
    std::vector<int> at(node_begin_.begin(), node_begin_.end() - 1);
    rank_.assign(nodes, -1);
    for (int n = 0; n < nodes; ++n) {
      const int d = device_of(n);
      if (d >= 0) keyed[at[d]++] = {priority[n], n};
    }
    by_rank_.resize(keyed.size());
    for (int d = 0; d < devices; ++d) {
      auto first = keyed.begin() + node_begin_[d], last = keyed.begin() + node_begin_[d + 1];
      auto before = [](const std::pair<double, int>& a, const std::pair<double, int>& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      };
      std::sort(first, last, before);
      for (int r = node_begin_[d]; r < node_begin_[d + 1]; ++r) {
        by_rank_[r] = keyed[r].second;
        rank_[keyed[r].second] = r - node_begin_[d];
      }
    }
    bits_.assign(word_begin_[devices], 0);
    lowest_word_.assign(devices, 0);
    size_.assign(devices, 0);
  }

  // Queues node n on device d (ranked there by Rank); again: no change.
  void Push(int d, int n) {
    const int r = rank_[n];
    uint64_t& word = bits_[word_begin_[d] + r / 64];
    const uint64_t bit = uint64_t{1} << (r % 64);
    if (word & bit) return;
    word |= bit;
    ++size_[d];
    lowest_word_[d] = std::min(lowest_word_[d], r / 64);
  }
  bool Empty(int d) const { return size_[d] == 0; }
  // Takes device d's best node out of its queue (not empty).
  int Pop(int d) {
    const uint64_t* words = bits_.data() + word_begin_[d];
    int w = lowest_word_[d];
    while (words[w] == 0) ++w;
    lowest_word_[d] = w;
    const int bit = __builtin_ctzll(words[w]);
    bits_[word_begin_[d] + w] &= words[w] - 1;
    --size_[d];
    return by_rank_[node_begin_[d] + w * 64 + bit];
  }

 private:
  std::vector<int> rank_;         // per node: its rank on its device (-1: none)
  std::vector<int> by_rank_;      // per device (from node_begin_): nodes by rank
  std::vector<int> node_begin_;   // per device: where its nodes start in by_rank_
  std::vector<int> word_begin_;   // per device: where its words start in bits_
  std::vector<uint64_t> bits_;    // per device: the ranks queued
  std::vector<int> lowest_word_;  // per device: no word below it has a bit set
  std::vector<int> size_;         // per device: nodes queued
};

}  // namespace quilt::sim_internal

#endif  // QUILT_SRC_SIM_READY_QUEUES_H_
