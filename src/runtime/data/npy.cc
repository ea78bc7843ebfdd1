#include "src/runtime/data/npy.h"

#include <cstring>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/common/files.h"
#include "src/common/status.h"

namespace quilt {

absl::StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& name) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a supported .npy file: ", why));
  };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("bad magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return bad(absl::StrCat("format version ", major));
  }
  if (offset + header_len > bytes.size()) return bad("truncated header");
  const std::string header = bytes.substr(offset, header_len);
  std::smatch m;
  static const std::regex descr_re("'descr'\\s*:\\s*'([^']*)'");
  static const std::regex order_re("'fortran_order'\\s*:\\s*(True|False)");
  static const std::regex shape_re("'shape'\\s*:\\s*\\(([^)]*)\\)");
  if (!std::regex_search(header, m, descr_re)) return bad("no descr");
  const std::string descr = m[1];
  if (!std::regex_search(header, m, order_re)) return bad("no fortran_order");
  if (m[1] == "True") return bad("Fortran order (save with np.ascontiguousarray)");
  if (!std::regex_search(header, m, shape_re)) return bad("no shape");
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(std::string(m[1]), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 0) return bad("bad shape");
    dims.push_back(d);
  }
  int64_t esize;
  DType dtype;
  if (descr == "<f4" || descr == "<f8") {
    dtype = DType::kF32;
    esize = descr == "<f4" ? 4 : 8;
  } else if (descr == "<i8" || descr == "<i4") {
    dtype = DType::kI64;
    esize = descr == "<i8" ? 8 : 4;
  } else {
    return bad("dtype " + descr + " (use float32, float64, int64 or int32, little-endian)");
  }
  absl::StatusOr<Tensor> t = Tensor::Empty(dtype, dims);
  if (!t.ok()) return bad(std::string(t.status().message()));
  const size_t data = offset + header_len;
  const size_t need = static_cast<size_t>(t->numel()) * esize;
  if (bytes.size() - data < need) {
    return bad(absl::StrCat("truncated data: ", bytes.size() - data, " bytes, expected ", need));
  }
  const char* src = bytes.data() + data;
  if (descr == "<f4" || descr == "<i8") {
    std::memcpy(t->raw(), src, need);
  } else if (descr == "<f8") {
    for (int64_t i = 0; i < t->numel(); ++i) {
      double v;
      std::memcpy(&v, src + i * 8, 8);
      t->f32()[i] = static_cast<float>(v);
    }
  } else {
    for (int64_t i = 0; i < t->numel(); ++i) {
      int32_t v;
      std::memcpy(&v, src + i * 4, 4);
      t->i64()[i] = v;
    }
  }
  return t;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParseNpy(bytes, path);
}

absl::Status WriteNpy(const std::string& path, const Tensor& t) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kI64) {
    return absl::InvalidArgumentError("only f32 and i64 tensors can be written as .npy");
  }
  std::string shape;
  for (int64_t d : t.dims()) absl::StrAppend(&shape, d, ",");
  if (t.rank() > 1) shape.pop_back();
  std::string header = absl::StrCat("{'descr': '", t.dtype() == DType::kF32 ? "<f4" : "<i8",
                                    "', 'fortran_order': False, 'shape': (", shape, "), }");
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.bytes());
  return WriteFileAtomically(path, out);
}

}  // namespace quilt
