// A dense host tensor: dtype, concrete dims and a 64-byte-aligned buffer
// shared between copies (copying a Tensor shares data; Clone() copies it).
// Used for constants and initial values in the graph and by the CPU runtime.
#ifndef QUILT_SRC_GRAPH_TENSOR_H_
#define QUILT_SRC_GRAPH_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/graph.pb.h"
#include "src/graph/dtype.h"

namespace quilt {

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized contents. Errors: INVALID_ARGUMENT for negative dims or
  // overflowing sizes; RESOURCE_EXHAUSTED when allocation fails.
  static absl::StatusOr<Tensor> Empty(DType dtype, const std::vector<int64_t>& dims);
  static absl::StatusOr<Tensor> Zeros(DType dtype, const std::vector<int64_t>& dims);
  // Convenience for tests and constants (CHECK-fails on bad dims).
  static Tensor FromF32(const std::vector<int64_t>& dims, const std::vector<float>& values);
  static Tensor FromI64(const std::vector<int64_t>& dims, const std::vector<int64_t>& values);
  static Tensor ScalarF32(float v) { return FromF32({}, {v}); }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * DTypeSize(dtype_); }
  bool valid() const { return dtype_ != DType::kInvalid; }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  float* f32() { return static_cast<float*>(raw()); }
  const float* f32() const { return static_cast<const float*>(raw()); }
  int64_t* i64() { return static_cast<int64_t*>(raw()); }
  const int64_t* i64() const { return static_cast<const int64_t*>(raw()); }

  // How many tensors share this one's storage (views of it included), and
  // whether `o` is one of them.
  long storage_users() const { return data_.use_count(); }
  bool SharesStorage(const Tensor& o) const {
    return data_ != nullptr && !data_.owner_before(o.data_) && !o.data_.owner_before(data_);
  }

  // Same data, other dims (numel must match).
  Tensor Reshaped(const std::vector<int64_t>& dims) const;
  Tensor Clone() const;
  void SetZero();

  // Lossless conversion to and from the API's TensorData.
  quilt::v1::TensorData ToProto() const;
  static absl::StatusOr<Tensor> FromProto(const quilt::v1::TensorData& data);

  // "f32[2,3]".
  std::string TypeString() const;

 private:
  DType dtype_ = DType::kInvalid;
  std::vector<int64_t> dims_;
  int64_t numel_ = 0;
  std::shared_ptr<uint8_t> data_;
};

// While one is alive on a thread, Tensor::Empty (and so every tensor made
// on that thread) refuses a tensor over `each_bytes`, and any past
// `total_bytes` made under it in all, with INVALID_ARGUMENT naming `what`.
// Bounds the memory that text from outside (a model whose constants are
// folded as it is imported) can make a process take: a shape of 2^31 rows
// is an error, not terabytes asked of the allocator. Limits nest: the
// innermost one applies.
class TensorSizeLimit {
 public:
  TensorSizeLimit(int64_t each_bytes, int64_t total_bytes, std::string what);
  ~TensorSizeLimit();
  TensorSizeLimit(const TensorSizeLimit&) = delete;
  TensorSizeLimit& operator=(const TensorSizeLimit&) = delete;

  // OK, counting `bytes` as made; or the error, counting nothing.
  absl::Status Take(int64_t bytes, const std::string& type);

 private:
  int64_t each_bytes_;
  int64_t left_bytes_;
  int64_t total_bytes_;
  std::string what_;
  TensorSizeLimit* outer_;
};

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_TENSOR_H_
