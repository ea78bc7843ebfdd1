// The tensors one device of the executor holds during a step: whole
// tensors or row ranges of them (instances), with the bytes they take
// (live, and the most since the last ResetPeak), and the bytes of the
// buffers held beside them (scratch: a collective's staging buffer, a
// parameter server's receive buffers). Thread-safe.
#ifndef QUILT_SRC_RUNTIME_TENSOR_STORE_H_
#define QUILT_SRC_RUNTIME_TENSOR_STORE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "src/graph/tensor.h"

namespace quilt {

struct InstanceKey {
  int tensor = 0;
  int64_t begin = 0, end = 0;
  bool operator==(const InstanceKey& o) const {
    return tensor == o.tensor && begin == o.begin && end == o.end;
  }
  template <typename H>
  friend H AbslHashValue(H h, const InstanceKey& k) {
    return H::combine(std::move(h), k.tensor, k.begin, k.end);
  }
};

// Whether instance `x` holds rows [begin, end) of its tensor (0, 0: the
// whole tensor) for a read of them: the exact instance, any whole one, or
// one whose rows hold a ranged read's.
inline bool InstanceHolds(const InstanceKey& x, int64_t begin, int64_t end) {
  if ((x.begin == begin && x.end == end) || (x.begin == 0 && x.end == 0)) return true;
  return !(begin == 0 && end == 0) && x.begin <= begin && end <= x.end;
}

class TensorStore {
 public:
  void Put(const InstanceKey& k, Tensor t);
  // The exact instance, or nullptr.
  bool Get(const InstanceKey& k, Tensor* out) const;
  // An instance that contains rows [begin, end) (or any instance of a whole
  // tensor when begin = end = 0): its key and value. The exact instance
  // first, then one a kernel or a whole receive produced, and only then one
  // being assembled from parts (which may still miss rows).
  bool FindContaining(int tensor, int64_t begin, int64_t end, InstanceKey* key, Tensor* out) const;
  // Writes `src` at rows [at, ...) along `axis` of the instance `k`,
  // creating it (zeros of `dims`) if absent; the instance counts as being
  // assembled until a Put replaces it.
  absl::Status WriteInto(const InstanceKey& k, DType dtype, const std::vector<int64_t>& dims,
                         int axis, int64_t at, const Tensor& src);
  // Writes `src` at rows [at, ...) of dim 0 of the existing instance `k`
  // (a slice of a gradient summed on its own). The first such write to a
  // value copies it, since its storage may be shared with other tensors;
  // later writes to the same value write in place. Errors: NOT_FOUND when
  // `k` is absent; those of WriteRows.
  absl::Status WriteSlice(const InstanceKey& k, int64_t at, const Tensor& src);
  // Writes float32 values of `dims` from `src` over the instance `k` where
  // nothing but the store holds its storage (no view of it, no reader's or
  // transfer's copy), as one step under the store's lock: a reader gets
  // the old value or the new one. The instance then counts as written
  // whole (as a Put). False, writing nothing, where it is absent, of
  // another type or shape, or shared.
  bool OverwriteIfSole(const InstanceKey& k, const std::vector<int64_t>& dims, const float* src);
  // Keeps only the keys in `keep`; the others' values are handed back, so
  // that the caller can free them when it suits it.
  std::vector<Tensor> Retain(const absl::flat_hash_map<InstanceKey, bool>& keep);
  std::vector<std::pair<InstanceKey, Tensor>> All() const;
  // The instances of one tensor.
  std::vector<std::pair<InstanceKey, Tensor>> Instances(int tensor) const;
  // Drops every instance of `tensor`; their values are handed back (as
  // Retain's).
  std::vector<Tensor> Erase(int tensor);
  // The same for the instances of `tensor` within rows [begin, end) (one
  // micro-batch's); begin = end = 0: every instance.
  std::vector<Tensor> EraseRows(int tensor, int64_t begin, int64_t end);
  // The same for the one instance `k` (empty when absent; the instances
  // it contains stay).
  std::vector<Tensor> EraseInstance(const InstanceKey& k);
  // Bytes of the values held (storage shared by several instances counted
  // once); the most held since the last ResetPeak, which returns it and
  // starts again from what is held now.
  int64_t live_bytes() const;
  int64_t ResetPeak();
  // Counts `bytes` of a buffer held beside the instances in the live (and
  // peak) bytes, until released.
  void HoldScratch(int64_t bytes);
  void ReleaseScratch(int64_t bytes);

 private:
  // Counts a value's storage in (once per storage) and out.
  void Hold(const Tensor& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(const Tensor& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Storage {
    int64_t bytes = 0;
    int refs = 0;
  };
  absl::flat_hash_map<const void*, Storage> storage_ ABSL_GUARDED_BY(mu_);
  int64_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<InstanceKey, Tensor> values_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::vector<InstanceKey>> by_tensor_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<InstanceKey> assembled_ ABSL_GUARDED_BY(mu_);
  // Per instance written by WriteSlice: the storage of its private copy.
  absl::flat_hash_map<InstanceKey, const void*> sliced_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_TENSOR_STORE_H_
