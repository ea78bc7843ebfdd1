#include "src/graph/tensor.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/shape.h"

namespace quilt {
namespace {

// Recycles tensor buffers by size: training steps allocate the same sizes
// every step, and fresh memory costs a page fault per 4 KiB. Buffers below
// 64 KiB go straight to malloc. At most kMaxCachedBytes are kept.
class BufferPool {
 public:
  static BufferPool& Get() {
    static BufferPool* pool = new BufferPool();
    return *pool;
  }
  static constexpr size_t kMinPooled = 64 << 10;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  static size_t Round(size_t bytes) {
    const size_t r = ((bytes + 63) / 64) * 64;
    return r == 0 ? 64 : r;
  }

  void* Allocate(size_t rounded) {
    if (rounded >= kMinPooled) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= rounded;
        return p;
      }
    }
    return std::aligned_alloc(64, rounded);
  }

  void Release(void* p, size_t rounded) {
    if (rounded >= kMinPooled) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ + rounded <= kMaxCachedBytes) {
        free_[rounded].push_back(p);
        cached_ += rounded;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

thread_local TensorSizeLimit* current_limit = nullptr;

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", b / double(int64_t{1} << 30));
  if (b >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / double(int64_t{1} << 20));
  return absl::StrCat(b, " bytes");
}

std::string TypeOf(DType dtype, const std::vector<int64_t>& dims) {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(dims, ","), "]");
}

}  // namespace

TensorSizeLimit::TensorSizeLimit(int64_t each_bytes, int64_t total_bytes, std::string what)
    : each_bytes_(each_bytes),
      left_bytes_(total_bytes),
      total_bytes_(total_bytes),
      what_(std::move(what)),
      outer_(current_limit) {
  current_limit = this;
}

TensorSizeLimit::~TensorSizeLimit() { current_limit = outer_; }

absl::Status TensorSizeLimit::Take(int64_t bytes, const std::string& type) {
  if (bytes > each_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(type, " would take ", Bytes(bytes), "; ", what_,
                                                   " may take at most ", Bytes(each_bytes_),
                                                   " each"));
  }
  if (bytes > left_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(type, " would take ", Bytes(bytes), " past the ",
                                                   Bytes(total_bytes_), " that ", what_,
                                                   " may take in all"));
  }
  left_bytes_ -= bytes;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Tensor::Empty(DType dtype, const std::vector<int64_t>& dims) {
  if (dtype == DType::kInvalid) return absl::InvalidArgumentError("tensor with invalid dtype");
  ASSIGN_OR_RETURN(int64_t numel, CheckedNumElements(dims));
  const int64_t esize = DTypeSize(dtype);
  if (numel > INT64_MAX / esize) return absl::InvalidArgumentError("tensor size overflows");
  if (current_limit != nullptr)
    RETURN_IF_ERROR(current_limit->Take(numel * esize, TypeOf(dtype, dims)));
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = dims;
  t.numel_ = numel;
  const size_t bytes = static_cast<size_t>(numel * esize);
  const size_t rounded = BufferPool::Round(bytes);
  void* p = BufferPool::Get().Allocate(rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes for ", t.TypeString()));
  }
  t.data_ = std::shared_ptr<uint8_t>(
      static_cast<uint8_t*>(p), [rounded](uint8_t* q) { BufferPool::Get().Release(q, rounded); });
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(DType dtype, const std::vector<int64_t>& dims) {
  ASSIGN_OR_RETURN(Tensor t, Empty(dtype, dims));
  t.SetZero();
  return t;
}

Tensor Tensor::FromF32(const std::vector<int64_t>& dims, const std::vector<float>& values) {
  Tensor t = Empty(DType::kF32, dims).value();
  if (static_cast<int64_t>(values.size()) != t.numel()) std::abort();
  std::memcpy(t.raw(), values.data(), t.bytes());
  return t;
}

Tensor Tensor::FromI64(const std::vector<int64_t>& dims, const std::vector<int64_t>& values) {
  Tensor t = Empty(DType::kI64, dims).value();
  if (static_cast<int64_t>(values.size()) != t.numel()) std::abort();
  std::memcpy(t.raw(), values.data(), t.bytes());
  return t;
}

Tensor Tensor::Reshaped(const std::vector<int64_t>& dims) const {
  Tensor t = *this;
  t.dims_ = dims;
  return t;
}

Tensor Tensor::Clone() const {
  if (!valid()) return Tensor();
  Tensor t = Empty(dtype_, dims_).value();
  if (bytes() > 0) std::memcpy(t.raw(), raw(), bytes());
  return t;
}

void Tensor::SetZero() {
  if (bytes() > 0) std::memset(raw(), 0, bytes());
}

quilt::v1::TensorData Tensor::ToProto() const {
  quilt::v1::TensorData d;
  d.set_dtype(quilt::ToProto(dtype_));
  for (int64_t x : dims_) d.add_dims(x);
  d.set_raw_data(static_cast<const char*>(raw()), bytes());
  return d;
}

absl::StatusOr<Tensor> Tensor::FromProto(const quilt::v1::TensorData& data) {
  ASSIGN_OR_RETURN(DType dtype, quilt::FromProto(data.dtype()));
  std::vector<int64_t> dims(data.dims().begin(), data.dims().end());
  // Checked before anything is allocated: dims a corrupt message gives
  // could ask for terabytes.
  ASSIGN_OR_RETURN(int64_t numel, CheckedNumElements(dims));
  const int64_t esize = DTypeSize(dtype);
  if (numel > INT64_MAX / esize || static_cast<int64_t>(data.raw_data().size()) != numel * esize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data of ", TypeOf(dtype, dims), " has ", data.raw_data().size(),
        " bytes, expected ",
        numel > INT64_MAX / esize ? std::string("more than 2^63") : absl::StrCat(numel * esize)));
  }
  ASSIGN_OR_RETURN(Tensor t, Empty(dtype, dims));
  if (t.bytes() > 0) std::memcpy(t.raw(), data.raw_data().data(), t.bytes());
  return t;
}

std::string Tensor::TypeString() const { return TypeOf(dtype_, dims_); }

}  // namespace quilt
