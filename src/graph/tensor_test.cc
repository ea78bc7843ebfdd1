// Tensor: sizes a message or a model makes up are refused before memory is
// asked for them (FromProto's dims against its data; TensorSizeLimit).
#include "src/graph/tensor.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(Tensor, FromProto_DimsTheDataDoesNotHold_RefusedBeforeAllocating) {
  quilt::v1::TensorData d = Tensor::FromF32({2, 2}, {1, 2, 3, 4}).ToProto();
  ASSERT_THAT(Tensor::FromProto(d), IsOk());
  // 2^40 x 2^10 floats: 4 PiB, which no allocator gives; the 16 bytes the
  // message holds say so first.
  d.clear_dims();
  d.add_dims(int64_t{1} << 40);
  d.add_dims(1024);
  EXPECT_THAT(Tensor::FromProto(d),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor data of f32[1099511627776,1024] has 16 bytes, expected "
                                 "4503599627370496")));
  // 2^62 floats: past 2^63 bytes.
  d.clear_dims();
  d.add_dims(int64_t{1} << 62);
  EXPECT_THAT(Tensor::FromProto(d),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected more than 2^63")));
}

TEST(TensorSizeLimit, RefusesOneTensorOverItsBoundAndAllPastTheTotal) {
  {
    TensorSizeLimit limit(/*each_bytes=*/1024, /*total_bytes=*/1536, "a test's tensor");
    EXPECT_THAT(Tensor::Empty(DType::kF32, {257}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("f32[257] would take 1028 bytes"),
                               HasSubstr("a test's tensor may take at most 1024 bytes each"))));
    // Refused tensors take nothing of the total.
    EXPECT_THAT(Tensor::Empty(DType::kF32, {256}), IsOk());
    EXPECT_THAT(Tensor::Empty(DType::kF32, {128}), IsOk());
    EXPECT_THAT(Tensor::Empty(DType::kI64, {1}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("i64[1] would take 8 bytes past the 1536 bytes that a test's "
                                   "tensor may take in all")));
    {
      // The innermost limit applies; the outer one again once it ends.
      TensorSizeLimit inner(int64_t{1} << 20, int64_t{1} << 20, "inner");
      EXPECT_THAT(Tensor::Empty(DType::kF32, {4096}), IsOk());
    }
    EXPECT_THAT(Tensor::Empty(DType::kF32, {1}), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // None once it ends.
  EXPECT_THAT(Tensor::Empty(DType::kF32, {1 << 20}), IsOk());
}

}  // namespace
}  // namespace quilt
