#include "src/runtime/tensor_store.h"

#include <algorithm>
#include <cstring>

#include "src/common/status.h"
#include "src/runtime/rows.h"

namespace quilt {

void TensorStore::Hold(const Tensor& t) {
  if (t.raw() == nullptr) return;
  auto [it, fresh] = storage_.try_emplace(t.raw(), Storage{t.bytes(), 0});
  ++it->second.refs;
  if (fresh) {
    live_bytes_ += t.bytes();
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }
}

void TensorStore::Release(const Tensor& t) {
  if (t.raw() == nullptr) return;
  auto it = storage_.find(t.raw());
  if (it == storage_.end()) return;
  if (--it->second.refs == 0) {
    live_bytes_ -= it->second.bytes;
    storage_.erase(it);
  }
}

void TensorStore::Put(const InstanceKey& k, Tensor t) {
  absl::MutexLock lock(&mu_);
  Hold(t);
  auto it = values_.find(k);
  if (it == values_.end()) {
    values_.emplace(k, std::move(t));
    by_tensor_[k.tensor].push_back(k);
  } else {
    Release(it->second);
    it->second = std::move(t);
  }
  assembled_.erase(k);
  sliced_.erase(k);
}

std::vector<Tensor> TensorStore::Erase(int tensor) { return EraseRows(tensor, 0, 0); }

std::vector<Tensor> TensorStore::EraseRows(int tensor, int64_t begin, int64_t end) {
  std::vector<Tensor> dropped;
  absl::MutexLock lock(&mu_);
  auto keys = by_tensor_.find(tensor);
  if (keys == by_tensor_.end()) return dropped;
  const bool all = begin == 0 && end == 0;
  std::vector<InstanceKey> kept;
  for (const InstanceKey& k : keys->second) {
    if (!all && !(k.begin >= begin && k.end <= end && k.begin < k.end)) {
      kept.push_back(k);
      continue;
    }
    auto it = values_.find(k);
    Release(it->second);
    dropped.push_back(std::move(it->second));
    values_.erase(it);
    assembled_.erase(k);
    sliced_.erase(k);
  }
  if (kept.empty()) {
    by_tensor_.erase(keys);
  } else {
    keys->second = std::move(kept);
  }
  return dropped;
}

std::vector<Tensor> TensorStore::EraseInstance(const InstanceKey& k) {
  std::vector<Tensor> dropped;
  absl::MutexLock lock(&mu_);
  auto it = values_.find(k);
  if (it == values_.end()) return dropped;
  Release(it->second);
  dropped.push_back(std::move(it->second));
  values_.erase(it);
  assembled_.erase(k);
  sliced_.erase(k);
  std::vector<InstanceKey>& keys = by_tensor_[k.tensor];
  keys.erase(std::find(keys.begin(), keys.end(), k));
  if (keys.empty()) by_tensor_.erase(k.tensor);
  return dropped;
}

int64_t TensorStore::ResetPeak() {
  absl::MutexLock lock(&mu_);
  const int64_t peak = peak_bytes_;
  peak_bytes_ = live_bytes_;
  return peak;
}

void TensorStore::HoldScratch(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

void TensorStore::ReleaseScratch(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  live_bytes_ -= bytes;
}

int64_t TensorStore::live_bytes() const {
  absl::MutexLock lock(&mu_);
  return live_bytes_;
}

bool TensorStore::Get(const InstanceKey& k, Tensor* out) const {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(k);
  if (it == values_.end()) return false;
  *out = it->second;
  return true;
}

bool TensorStore::FindContaining(int tensor, int64_t begin, int64_t end, InstanceKey* key,
                                 Tensor* out) const {
  absl::MutexLock lock(&mu_);
  auto exact = values_.find(InstanceKey{tensor, begin, end});
  if (exact != values_.end()) {
    *key = exact->first;
    *out = exact->second;
    return true;
  }
  auto it = by_tensor_.find(tensor);
  if (it == by_tensor_.end()) return false;
  for (const bool assembled : {false, true}) {
    for (const InstanceKey& k : it->second) {
      if (assembled_.contains(k) != assembled) continue;
      if (InstanceHolds(k, begin, end)) {
        *key = k;
        *out = values_.at(k);
        return true;
      }
    }
  }
  return false;
}

std::vector<Tensor> TensorStore::Retain(const absl::flat_hash_map<InstanceKey, bool>& keep) {
  std::vector<Tensor> dropped;
  absl::MutexLock lock(&mu_);
  for (auto it = values_.begin(); it != values_.end();) {
    if (keep.contains(it->first)) {
      ++it;
    } else {
      Release(it->second);
      dropped.push_back(std::move(it->second));
      values_.erase(it++);
    }
  }
  for (auto& [t, keys] : by_tensor_) {
    keys.erase(std::remove_if(keys.begin(), keys.end(),
                              [&](const InstanceKey& k) { return !keep.contains(k); }),
               keys.end());
  }
  for (auto it = assembled_.begin(); it != assembled_.end();) {
    if (keep.contains(*it)) {
      ++it;
    } else {
      assembled_.erase(it++);
    }
  }
  for (auto it = sliced_.begin(); it != sliced_.end();) {
    if (keep.contains(it->first)) {
      ++it;
    } else {
      sliced_.erase(it++);
    }
  }
  return dropped;
}

std::vector<std::pair<InstanceKey, Tensor>> TensorStore::All() const {
  absl::MutexLock lock(&mu_);
  return {values_.begin(), values_.end()};
}

std::vector<std::pair<InstanceKey, Tensor>> TensorStore::Instances(int tensor) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<InstanceKey, Tensor>> out;
  auto it = by_tensor_.find(tensor);
  if (it == by_tensor_.end()) return out;
  for (const InstanceKey& k : it->second) out.push_back({k, values_.at(k)});
  return out;
}

absl::Status TensorStore::WriteInto(const InstanceKey& k, DType dtype,
                                    const std::vector<int64_t>& dims, int axis, int64_t at,
                                    const Tensor& src) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(k);
  if (it == values_.end()) {
    ASSIGN_OR_RETURN(Tensor fresh, Tensor::Zeros(dtype, dims));
    Hold(fresh);
    it = values_.emplace(k, std::move(fresh)).first;
    by_tensor_[k.tensor].push_back(k);
    assembled_.insert(k);
  }
  return WriteRows(&it->second, axis, at, src);
}

absl::Status TensorStore::WriteSlice(const InstanceKey& k, int64_t at, const Tensor& src) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(k);
  if (it == values_.end()) return absl::NotFoundError("no instance to write a slice into");
  auto s = sliced_.find(k);
  if (s == sliced_.end() || s->second != it->second.raw()) {
    Tensor copy = it->second.Clone();
    Hold(copy);
    Release(it->second);
    it->second = std::move(copy);
    sliced_[k] = it->second.raw();
  }
  return WriteRows(&it->second, 0, at, src);
}

bool TensorStore::OverwriteIfSole(const InstanceKey& k, const std::vector<int64_t>& dims,
                                  const float* src) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(k);
  if (it == values_.end()) return false;
  Tensor& v = it->second;
  if (v.dtype() != DType::kF32 || v.dims() != dims || v.storage_users() != 1) return false;
  std::memcpy(v.raw(), src, static_cast<size_t>(v.bytes()));
  assembled_.erase(k);
  sliced_.erase(k);
  return true;
}

}  // namespace quilt
