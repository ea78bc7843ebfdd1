// .npz archives: the standard CRC-32 check value; arrays written and read
// back by name with their types, shapes and values; archives NumPy wrote
// (ZIP64 local headers) read; compressed, corrupt and non-ZIP input
// refused naming the entry; names that cannot be written refused.
#include "src/runtime/data/npz.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"

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

}  // namespace
}  // namespace quilt
