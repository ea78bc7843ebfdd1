// NumPy .npy files: reading (f32, f64 → f32, i64, i32 → i64; C order,
// little-endian, format versions 1–3) whole or memory-mapped, and writing
// (f32, i64). Errors name the file and what is wrong with it.
#ifndef QUILT_SRC_RUNTIME_DATA_NPY_H_
#define QUILT_SRC_RUNTIME_DATA_NPY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/tensor.h"

namespace quilt {

// Errors: NOT_FOUND (no file), INVALID_ARGUMENT (not a supported .npy).
absl::StatusOr<Tensor> ReadNpy(const std::string& path);
// Parses .npy bytes; `name` is used in errors.
absl::StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& name);
absl::Status WriteNpy(const std::string& path, const Tensor& t);
// What a .npy file of `t` holds before its values (magic, version, header).
// Errors: INVALID_ARGUMENT (a type other than f32 and i64).
absl::StatusOr<std::string> NpyPreamble(const Tensor& t);

struct NpyHeader {
  std::string descr;          // "<f4", "<f8", "<i8", "<i4"
  DType dtype = DType::kF32;  // what it reads as
  int element_bytes = 4;      // in the file
  std::vector<int64_t> dims;
  size_t data_offset = 0;
};

// Parses the header of .npy bytes and checks the data is all there.
absl::StatusOr<NpyHeader> ParseNpyHeader(const char* bytes, size_t size, const std::string& name);
// Copies `n` elements from the file's layout into `dst` (of h.dtype).
void ConvertNpyElements(const NpyHeader& h, const char* src, int64_t n, void* dst);

// A .npy file mapped into memory (read lazily by the OS): datasets of any
// size open at once.
class NpyMapping {
 public:
  // Errors: as ReadNpy.
  static absl::StatusOr<std::shared_ptr<const NpyMapping>> Open(const std::string& path);
  ~NpyMapping();
  const NpyHeader& header() const { return header_; }
  const char* data() const { return base_ + header_.data_offset; }

 private:
  NpyMapping() = default;
  const char* base_ = nullptr;
  size_t size_ = 0;
  NpyHeader header_;
};

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_DATA_NPY_H_
