// .npz archives: the standard CRC-32 check value; arrays written and read
// back by name with their types, shapes and values; archives NumPy wrote
// (ZIP64 local headers) read; compressed, corrupt and non-ZIP input
// refused naming the entry; ZIP64 entries read and malformed ones refused
// without reading past the input; names that cannot be written refused;
// over-long .npy headers refused.
#include "src/runtime/data/npz.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"
#include "src/runtime/data/npy.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Tensor F32(const std::vector<int64_t>& dims, float start) {
  absl::StatusOr<Tensor> t = Tensor::Empty(DType::kF32, dims);
  EXPECT_THAT(t.status(), IsOk());
  for (int64_t i = 0; i < t->numel(); ++i) t->f32()[i] = start + 0.5f * static_cast<float>(i);
  return *t;
}

TEST(Crc32, TheStandardCheckValue) {
  EXPECT_EQ(Crc32("123456789", 9), 0xcbf43926u);
  // Continued over two calls, the same.
  EXPECT_EQ(Crc32("6789", 4, Crc32("12345", 5)), 0xcbf43926u);
}

TEST(Npz, ArraysComeBackByNameWithTheirTypesShapesAndValues) {
  absl::StatusOr<Tensor> ids = Tensor::Empty(DType::kI64, {3});
  ASSERT_THAT(ids.status(), IsOk());
  ids->i64()[0] = -1, ids->i64()[1] = 1LL << 40, ids->i64()[2] = 7;
  const std::vector<std::pair<std::string, Tensor>> arrays = {
      {"encoder.0/weight", F32({2, 3}, -1)}, {"ids", *ids}, {"scale", F32({}, 4)}};
  absl::StatusOr<std::string> bytes = NpzArchive(arrays);
  ASSERT_THAT(bytes.status(), IsOk());
  absl::StatusOr<std::map<std::string, Tensor>> back = ParseNpz(*bytes, "a.npz");
  ASSERT_THAT(back.status(), IsOk());
  ASSERT_EQ(back->size(), 3u);
  for (const auto& [name, t] : arrays) {
    ASSERT_EQ(back->count(name), 1u) << name;
    const Tensor& b = back->at(name);
    EXPECT_EQ(b.dtype(), t.dtype()) << name;
    EXPECT_EQ(b.dims(), t.dims()) << name;
    ASSERT_EQ(b.bytes(), t.bytes());
    EXPECT_EQ(std::memcmp(b.raw(), t.raw(), static_cast<size_t>(t.bytes())), 0) << name;
  }
}

TEST(Npz, ReadsWhatNumpySavezWrote) {
  absl::StatusOr<std::string> bytes = ReadFile("test/fixtures/npz/numpy_savez.npz");
  ASSERT_THAT(bytes.status(), IsOk());
  absl::StatusOr<std::map<std::string, Tensor>> a = ParseNpz(*bytes, "numpy_savez.npz");
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_EQ(a->size(), 3u);
  // w = arange(6).reshape(2, 3) * 0.5 (f32), 'layer.0/bias' = [-1, 2, 7]
  // (i64), s = 3.25 (a scalar).
  const Tensor& w = a->at("w");
  EXPECT_EQ(w.dims(), (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w.f32()[i], 0.5f * static_cast<float>(i));
  const Tensor& bias = a->at("layer.0/bias");
  ASSERT_EQ(bias.dtype(), DType::kI64);
  EXPECT_EQ(std::vector<int64_t>(bias.i64(), bias.i64() + 3), (std::vector<int64_t>{-1, 2, 7}));
  EXPECT_EQ(a->at("s").rank(), 0);
  EXPECT_EQ(a->at("s").f32()[0], 3.25f);
}

TEST(Npz, CompressedCorruptAndNonZipInputIsRefusedNamingIt) {
  absl::StatusOr<std::string> compressed = ReadFile("test/fixtures/npz/numpy_savez_compressed.npz");
  ASSERT_THAT(compressed.status(), IsOk());
  EXPECT_THAT(ParseNpz(*compressed, "c.npz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("c.npz"), HasSubstr("'w.npy' is compressed"),
                             HasSubstr("numpy.savez"))));
  absl::StatusOr<std::string> bytes = NpzArchive({{"a", F32({4}, 0)}, {"b", F32({8}, 1)}});
  ASSERT_THAT(bytes.status(), IsOk());
  // A flipped bit in b's values.
  std::string corrupt = *bytes;
  const size_t b_values = corrupt.find("b.npy") + 5 + 128 + 4;
  corrupt[b_values] ^= 0x10;
  EXPECT_THAT(ParseNpz(corrupt, "x.npz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'b.npy'"), HasSubstr("CRC-32 mismatch"))));
  // Cut short: the directory at its end is gone.
  EXPECT_THAT(ParseNpz(bytes->substr(0, bytes->size() / 2), "half.npz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("half.npz")));
  EXPECT_THAT(ParseNpz("not a zip file at all, but long enough", "t.npz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no ZIP end-of-central-directory record")));
}

TEST(Npz, NamesAndTypesThatCannotBeWrittenAreRefused) {
  EXPECT_THAT(NpzArchive({{"", F32({1}, 0)}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a name")));
  EXPECT_THAT(NpzArchive({{"w", F32({1}, 0)}, {"w", F32({2}, 0)}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w' is in the .npz twice")));
  absl::StatusOr<Tensor> mask = Tensor::Empty(DType::kBool, {2});
  ASSERT_THAT(mask.status(), IsOk());
  EXPECT_THAT(NpzArchive({{"mask", *mask}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'mask'")));
}

void Put16(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, v & 0xffff);
  Put16(out, v >> 16);
}
void Put64(std::string* out, uint64_t v) {
  Put32(out, static_cast<uint32_t>(v));
  Put32(out, static_cast<uint32_t>(v >> 32));
}

// One stored entry "x.npy" as a ZIP64 writer lays it out: the central
// header's sizes and offset 0xffffffff, the real ones in its ZIP64 extra
// field (`usize`, `csize`, `offset`; `extra_size` as it claims), after a
// `pad` extra field of its own. The APPNOTE layout, written here apart
// from the writer under test.
std::string Zip64Entry(const std::string& npy, uint64_t usize, uint64_t csize, uint64_t offset,
                       uint32_t extra_size = 24) {
  const std::string name = "x.npy";
  std::string out;
  Put32(&out, 0x04034b50);
  for (uint32_t v : {45u, 0u, 0u, 0u, 0x21u}) Put16(&out, v);
  Put32(&out, Crc32(npy.data(), npy.size()));
  Put32(&out, 0xffffffffu);
  Put32(&out, 0xffffffffu);
  Put16(&out, static_cast<uint32_t>(name.size()));
  Put16(&out, 20);
  out += name;
  Put16(&out, 1);
  Put16(&out, 16);
  Put64(&out, npy.size());
  Put64(&out, npy.size());
  out += npy;
  const uint32_t central_at = static_cast<uint32_t>(out.size());
  std::string extra;
  Put16(&extra, 0xcafe);  // an unknown field first: skipped
  Put16(&extra, 2);
  Put16(&extra, 0);
  Put16(&extra, 1);
  Put16(&extra, extra_size);
  Put64(&extra, usize);
  Put64(&extra, csize);
  Put64(&extra, offset);
  std::string central;
  Put32(&central, 0x02014b50);
  for (uint32_t v : {45u, 45u, 0u, 0u, 0u, 0x21u}) Put16(&central, v);
  Put32(&central, Crc32(npy.data(), npy.size()));
  Put32(&central, 0xffffffffu);
  Put32(&central, 0xffffffffu);
  Put16(&central, static_cast<uint32_t>(name.size()));
  Put16(&central, static_cast<uint32_t>(extra.size()));
  for (uint32_t v : {0u, 0u, 0u}) Put16(&central, v);
  Put32(&central, 0);
  Put32(&central, 0xffffffffu);
  central += name + extra;
  out += central;
  Put32(&out, 0x06054b50);
  for (uint32_t v : {0u, 0u, 1u, 1u}) Put16(&out, v);
  Put32(&out, static_cast<uint32_t>(central.size()));
  Put32(&out, central_at);
  Put16(&out, 0);
  return out;
}

// A one-array archive of ours: its .npy bytes.
std::string NpyOf(const Tensor& t) {
  absl::StatusOr<std::string> bytes = NpzArchive({{"x", t}});
  EXPECT_THAT(bytes.status(), IsOk());
  const size_t at = bytes->find("\x93NUMPY");
  return bytes->substr(at, static_cast<size_t>(t.bytes()) + 128);
}

TEST(Npz, Zip64SizesAndOffsetsAreRead_AndWrongOnesRefusedWithoutReadingPastTheFile) {
  const Tensor t = F32({3, 5}, 2);
  const std::string npy = NpyOf(t);
  ASSERT_EQ(npy.size(), 128u + 60u);
  absl::StatusOr<std::map<std::string, Tensor>> a =
      ParseNpz(Zip64Entry(npy, npy.size(), npy.size(), 0), "z64.npz");
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_EQ(a->count("x"), 1u);
  EXPECT_EQ(a->at("x").dims(), t.dims());
  EXPECT_EQ(a->at("x").f32()[14], t.f32()[14]);
  // Offsets and sizes near 2^64 (no wrap-around past the checks), a field
  // that claims more than its extra area, sizes that disagree.
  for (const auto& [bytes, why] : std::vector<std::pair<std::string, std::string>>{
           {Zip64Entry(npy, npy.size(), npy.size(), ~uint64_t{0} - 15), "local header"},
           {Zip64Entry(npy, ~uint64_t{0} - 7, ~uint64_t{0} - 7, 0), "past the end"},
           {Zip64Entry(npy, npy.size(), npy.size(), 0, 0xffff), "extra field runs past"},
           {Zip64Entry(npy, npy.size(), npy.size() + 1, 0), "two sizes differ"},
           {Zip64Entry(npy, npy.size(), npy.size(), 0, 8), "short ZIP64 extra field"}}) {
    EXPECT_THAT(ParseNpz(bytes, "bad.npz").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(why)));
  }
}

TEST(Npz, TheWritersLocalHeadersAgreeWithItsDirectory) {
  // Read apart from ParseNpz, which takes sizes and CRCs from the
  // directory alone: each local header's CRC, sizes and name.
  absl::StatusOr<std::string> bytes = NpzArchive({{"a", F32({4}, 0)}, {"bé", F32({2, 2}, 1)}});
  ASSERT_THAT(bytes.status(), IsOk());
  auto u16 = [&](size_t at) {
    return static_cast<uint32_t>(static_cast<unsigned char>((*bytes)[at]) |
                                 (static_cast<unsigned char>((*bytes)[at + 1]) << 8));
  };
  auto u32 = [&](size_t at) { return u16(at) | (u16(at + 2) << 16); };
  size_t at = 0;
  for (const std::string name : {"a.npy", "bé.npy"}) {
    ASSERT_EQ(u32(at), 0x04034b50u);
    EXPECT_EQ(u16(at + 6), 0x0800u) << "names flagged UTF-8";
    EXPECT_EQ(u16(at + 8), 0u) << "stored";
    const uint32_t size = u32(at + 18);
    EXPECT_EQ(u32(at + 22), size);
    ASSERT_EQ(u16(at + 26), name.size());
    EXPECT_EQ(bytes->substr(at + 30, name.size()), name);
    const size_t data = at + 30 + name.size() + u16(at + 28);
    EXPECT_EQ(bytes->compare(data, 6, "\x93NUMPY"), 0);
    EXPECT_EQ(Crc32(bytes->data() + data, size), u32(at + 14)) << name;
    at = data + size;
  }
  EXPECT_EQ(u32(at), 0x02014b50u) << "the directory follows the entries";
}

TEST(Npy, AHeaderLongerThanNumpyWritesIsRefused) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': '" +
                       std::string(30000, 'a') + "'}";
  header += '\n';
  std::string npy = "\x93NUMPY";
  npy += '\x01';
  npy += '\x00';
  npy += static_cast<char>(header.size() & 0xff);
  npy += static_cast<char>(header.size() >> 8);
  npy += header + std::string(4, '\0');
  EXPECT_THAT(ParseNpy(npy, "long.npy").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("long.npy"), HasSubstr("are not read"))));
}

}  // namespace
}  // namespace quilt
