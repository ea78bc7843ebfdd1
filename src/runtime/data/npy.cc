#include "src/runtime/data/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/common/files.h"
#include "src/common/status.h"

namespace quilt {
namespace {

constexpr size_t kMaxNpyHeaderBytes = 4096;

}  // namespace

absl::StatusOr<NpyHeader> ParseNpyHeader(const char* bytes, size_t size, const std::string& name) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a supported .npy file: ", why));
  };
  if (size < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0) return bad("bad magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return bad(absl::StrCat("format version ", major));
  }
  if (offset + header_len > size) return bad("truncated header");
  // NumPy's own headers take tens of bytes (numpy.load refuses over
  // 10000); a longer one is not parsed.
  if (header_len > kMaxNpyHeaderBytes) {
    return bad(absl::StrCat("a header of ", header_len, " bytes (more than ", kMaxNpyHeaderBytes,
                            " are not read)"));
  }
  const std::string header(bytes + offset, header_len);
  std::smatch m;
  static const std::regex descr_re("'descr'\\s*:\\s*'([^']*)'");
  static const std::regex order_re("'fortran_order'\\s*:\\s*(True|False)");
  static const std::regex shape_re("'shape'\\s*:\\s*\\(([^)]*)\\)");
  if (!std::regex_search(header, m, descr_re)) return bad("no descr");
  NpyHeader h;
  h.descr = m[1];
  if (!std::regex_search(header, m, order_re)) return bad("no fortran_order");
  if (m[1] == "True") return bad("Fortran order (save with np.ascontiguousarray)");
  if (!std::regex_search(header, m, shape_re)) return bad("no shape");
  for (absl::string_view part : absl::StrSplit(std::string(m[1]), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 0) return bad("bad shape");
    h.dims.push_back(d);
  }
  if (h.descr == "<f4" || h.descr == "<f8") {
    h.dtype = DType::kF32;
    h.element_bytes = h.descr == "<f4" ? 4 : 8;
  } else if (h.descr == "<i8" || h.descr == "<i4") {
    h.dtype = DType::kI64;
    h.element_bytes = h.descr == "<i8" ? 8 : 4;
  } else {
    return bad("dtype " + h.descr + " (use float32, float64, int64 or int32, little-endian)");
  }
  h.data_offset = offset + header_len;
  // The shape's bytes, without overflow: a header may claim more than
  // any file holds.
  const size_t have = size - h.data_offset;
  size_t need = static_cast<size_t>(h.element_bytes);
  bool empty = false;
  for (int64_t d : h.dims) empty |= d == 0;
  for (int64_t d : h.dims) {
    if (empty) break;
    if (static_cast<size_t>(d) > have / need) {
      return bad(absl::StrCat("truncated data: the shape (", absl::StrJoin(h.dims, ", "),
                              ") needs more than the ", have, " bytes of data the file has"));
    }
    need *= static_cast<size_t>(d);
  }
  if (empty) need = 0;
  if (have < need) {
    return bad(absl::StrCat("truncated data: ", have, " bytes, expected ", need));
  }
  return h;
}

void ConvertNpyElements(const NpyHeader& h, const char* src, int64_t n, void* dst) {
  if (h.descr == "<f4" || h.descr == "<i8") {
    std::memcpy(dst, src, static_cast<size_t>(n) * static_cast<size_t>(h.element_bytes));
  } else if (h.descr == "<f8") {
    float* out = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + i * 8, 8);
      out[i] = static_cast<float>(v);
    }
  } else {
    int64_t* out = static_cast<int64_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, src + i * 4, 4);
      out[i] = v;
    }
  }
}

absl::StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& name) {
  ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes.data(), bytes.size(), name));
  absl::StatusOr<Tensor> t = Tensor::Empty(h.dtype, h.dims);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a supported .npy file: ", t.status().message()));
  }
  ConvertNpyElements(h, bytes.data() + h.data_offset, t->numel(), t->raw());
  return t;
}

absl::StatusOr<std::shared_ptr<const NpyMapping>> NpyMapping::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? absl::NotFoundError(absl::StrCat(path, ": no such file"))
                           : absl::UnavailableError(absl::StrCat(path, ": ", strerror(errno)));
  }
  struct stat st = {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return absl::InvalidArgumentError(path + ": not a supported .npy file: empty");
  }
  void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return absl::UnavailableError(absl::StrCat(path, ": ", strerror(errno)));
  auto m = std::shared_ptr<NpyMapping>(new NpyMapping());
  m->base_ = static_cast<const char*>(p);
  m->size_ = static_cast<size_t>(st.st_size);
  ASSIGN_OR_RETURN(m->header_, ParseNpyHeader(m->base_, m->size_, path));
  return std::shared_ptr<const NpyMapping>(std::move(m));
}

NpyMapping::~NpyMapping() {
  if (base_ != nullptr) munmap(const_cast<char*>(base_), size_);
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParseNpy(bytes, path);
}

absl::StatusOr<std::string> NpyPreamble(const Tensor& t) {
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
  return out;
}

absl::Status WriteNpy(const std::string& path, const Tensor& t) {
  ASSIGN_OR_RETURN(const std::string out, NpyPreamble(t));
  // The values go from the tensor to the file (a checkpoint's large
  // tensors are not copied into a string first).
  return WriteFileAtomicallyWith(path, [&](int fd) {
    RETURN_IF_ERROR(WriteAll(fd, out.data(), out.size(), path));
    return WriteAll(fd, t.raw(), static_cast<size_t>(t.bytes()), path);
  });
}

}  // namespace quilt
