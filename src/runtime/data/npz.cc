#include "src/runtime/data/npz.h"

#include <array>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/runtime/data/npy.h"

namespace quilt {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentral = 0x06054b50;
constexpr uint64_t kNoZip64Limit = 0xffffffffu;
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01

const std::array<uint32_t, 256>& CrcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void Put16(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, v & 0xffff);
  Put16(out, v >> 16);
}
uint32_t Get16(const std::string& b, size_t at) {
  return static_cast<unsigned char>(b[at]) | (static_cast<unsigned char>(b[at + 1]) << 8);
}
uint32_t Get32(const std::string& b, size_t at) { return Get16(b, at) | (Get16(b, at + 2) << 16); }
uint64_t Get64(const std::string& b, size_t at) {
  return Get32(b, at) | (static_cast<uint64_t>(Get32(b, at + 4)) << 32);
}

// The fields a local and a central header share, from "version needed" on.
void PutCommon(std::string* out, uint32_t crc, uint32_t size, size_t name_size) {
  Put16(out, 20);      // version needed: 2.0
  Put16(out, 0x0800);  // flags: names in UTF-8
  Put16(out, 0);       // stored
  Put16(out, 0);       // time
  Put16(out, kDosDate1980);
  Put32(out, crc);
  Put32(out, size);  // compressed
  Put32(out, size);  // uncompressed
  Put16(out, static_cast<uint32_t>(name_size));
  Put16(out, 0);  // extra field
}

}  // namespace

uint32_t Crc32(const void* data, size_t size, uint32_t crc) {
  const auto& table = CrcTable();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

absl::StatusOr<std::string> NpzArchive(const std::vector<std::pair<std::string, Tensor>>& arrays) {
  if (arrays.size() >= 0xffff) {
    return absl::ResourceExhaustedError(
        absl::StrCat(arrays.size(), " arrays are more than an .npz without ZIP64 holds (65534)"));
  }
  std::string out, central;
  std::set<std::string> names;
  for (const auto& [name, t] : arrays) {
    if (name.empty()) return absl::InvalidArgumentError("an .npz array needs a name");
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is in the .npz twice"));
    }
    absl::StatusOr<std::string> preamble = NpyPreamble(t);
    if (!preamble.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "': ", preamble.status().message()));
    }
    const std::string entry = name + ".npy";
    if (entry.size() > 0xffff) {
      return absl::InvalidArgumentError(
          absl::StrCat("an .npz array's name takes at most 65531 bytes, not ", name.size()));
    }
    const uint64_t size = preamble->size() + static_cast<uint64_t>(t.bytes());
    const uint64_t offset = out.size();
    if (offset + 30 + entry.size() + size >= kNoZip64Limit) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the arrays take 4 GiB or more from '", name,
                       "' on: more than an .npz without ZIP64 holds"));
    }
    const uint32_t crc =
        Crc32(t.raw(), static_cast<size_t>(t.bytes()), Crc32(preamble->data(), preamble->size()));
    Put32(&out, kLocalHeader);
    PutCommon(&out, crc, static_cast<uint32_t>(size), entry.size());
    out += entry;
    out += *preamble;
    out.append(static_cast<const char*>(t.raw()), static_cast<size_t>(t.bytes()));
    Put32(&central, kCentralHeader);
    Put16(&central, 20);  // made by: 2.0
    PutCommon(&central, crc, static_cast<uint32_t>(size), entry.size());
    Put16(&central, 0);  // comment
    Put16(&central, 0);  // disk
    Put16(&central, 0);  // internal attributes
    Put32(&central, 0);  // external attributes
    Put32(&central, static_cast<uint32_t>(offset));
    central += entry;
  }
  if (out.size() + central.size() + 22 >= kNoZip64Limit) {
    return absl::ResourceExhaustedError("the arrays take 4 GiB or more: more than an .npz holds");
  }
  const uint32_t central_offset = static_cast<uint32_t>(out.size());
  out += central;
  Put32(&out, kEndOfCentral);
  Put16(&out, 0);  // this disk
  Put16(&out, 0);  // the central directory's disk
  Put16(&out, static_cast<uint32_t>(arrays.size()));
  Put16(&out, static_cast<uint32_t>(arrays.size()));
  Put32(&out, static_cast<uint32_t>(central.size()));
  Put32(&out, central_offset);
  Put16(&out, 0);  // comment
  return out;
}

absl::StatusOr<std::map<std::string, Tensor>> ParseNpz(const std::string& bytes,
                                                       const std::string& name) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a readable .npz: ", why));
  };
  // The end-of-central-directory record: the last one, within a comment's
  // reach (64 KiB) of the end.
  if (bytes.size() < 22) return bad("too short for a ZIP file");
  size_t end = std::string::npos;
  const size_t lowest = bytes.size() > 22 + 0xffff ? bytes.size() - 22 - 0xffff : 0;
  for (size_t at = bytes.size() - 22 + 1; at-- > lowest;) {
    if (Get32(bytes, at) == kEndOfCentral) {
      end = at;
      break;
    }
  }
  if (end == std::string::npos) return bad("no ZIP end-of-central-directory record");
  const uint32_t entries = Get16(bytes, end + 10);
  const uint64_t central_size = Get32(bytes, end + 12), central_at = Get32(bytes, end + 16);
  if (entries == 0xffff || central_at == kNoZip64Limit) {
    return bad("a ZIP64 archive (65535 entries or 4 GiB and more) is not read");
  }
  if (central_at + central_size > end) return bad("its central directory lies past its end");
  std::map<std::string, Tensor> out;
  size_t at = central_at;
  for (uint32_t i = 0; i < entries; ++i) {
    if (at + 46 > end || Get32(bytes, at) != kCentralHeader) {
      return bad(absl::StrCat("central directory entry ", i, " does not read"));
    }
    const uint32_t flags = Get16(bytes, at + 8), method = Get16(bytes, at + 10);
    const uint32_t crc = Get32(bytes, at + 16);
    uint64_t csize = Get32(bytes, at + 20), usize = Get32(bytes, at + 24);
    const size_t name_size = Get16(bytes, at + 28), extra_size = Get16(bytes, at + 30),
                 comment_size = Get16(bytes, at + 32);
    uint64_t local = Get32(bytes, at + 42);
    if (at + 46 + name_size + extra_size + comment_size > end) {
      return bad(absl::StrCat("central directory entry ", i, " runs past the directory"));
    }
    const std::string entry = bytes.substr(at + 46, name_size);
    // ZIP64 sizes (numpy.savez writes entries with force_zip64): the
    // extra field's 8-byte values stand for the fields set to 0xffffffff.
    const size_t extra_end = at + 46 + name_size + extra_size;
    for (size_t e = at + 46 + name_size; e + 4 <= extra_end;) {
      const uint32_t id = Get16(bytes, e), size = Get16(bytes, e + 2);
      if (e + 4 + size > extra_end) return bad("'" + entry + "': an extra field runs past its end");
      size_t v = e + 4;
      if (id == 0x0001) {
        for (uint64_t* field : {&usize, &csize, &local}) {
          if (*field != kNoZip64Limit) continue;
          if (v + 8 > e + 4 + size) return bad("'" + entry + "': a short ZIP64 extra field");
          *field = Get64(bytes, v);
          v += 8;
        }
      }
      e += 4 + size;
    }
    at += 46 + name_size + extra_size + comment_size;
    if (flags & 0x1) return bad("'" + entry + "' is encrypted");
    if (method != 0) {
      return bad("'" + entry +
                 "' is compressed (numpy.savez_compressed): write the arrays with numpy.savez");
    }
    if (csize != usize) return bad("'" + entry + "': stored, but its two sizes differ");
    if (bytes.size() < 30 || local > bytes.size() - 30 || Get32(bytes, local) != kLocalHeader) {
      return bad("'" + entry + "': its local header does not read");
    }
    const uint64_t data = local + 30 + Get16(bytes, local + 26) + Get16(bytes, local + 28);
    if (data > bytes.size() || usize > bytes.size() - data) {
      return bad("'" + entry + "' runs past the end of the file");
    }
    if (Crc32(bytes.data() + data, usize) != crc) {
      return bad("'" + entry + "': CRC-32 mismatch (the file is corrupt)");
    }
    std::string key = entry;
    if (absl::EndsWith(key, ".npy")) key.resize(key.size() - 4);
    if (out.count(key)) return bad("'" + key + "' is in it twice");
    ASSIGN_OR_RETURN(out[key], ParseNpy(bytes.substr(data, usize), name + ": " + entry));
  }
  return out;
}

}  // namespace quilt
