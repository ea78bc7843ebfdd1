#include "src/cluster/local_node.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/cluster/cuda_devices.h"
#include "src/cluster/host_info.h"
#include "src/common/status_matchers.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DiscoverLocalNode, CpuDevicesSplitHostAndAreCalibrated) {
  LocalNodeOptions o;
  o.node_id = "n";
  o.cpu_devices = 1;
  o.calibration = absl::Milliseconds(100);
  o.discover_cuda = false;
  auto info = DiscoverLocalNode(o);
  ASSERT_THAT(info, IsOk());
  ASSERT_EQ(info->devices_size(), 1);
  const auto& d = info->devices(0);
  EXPECT_EQ(d.id(), "n/cpu:0");
  EXPECT_EQ(d.kind(), quilt::v1::DEVICE_KIND_CPU);
  // Any CPU that runs the tests does more than 100 MFLOP/s in SGEMM and less
  // than 100 TFLOP/s.
  EXPECT_GT(d.measured_gemm_flops_per_s(), 1e8);
  EXPECT_LT(d.measured_gemm_flops_per_s(), 1e14);
  EXPECT_GT(d.memory_bandwidth_bytes_per_s(), 1e8);
  EXPECT_EQ(d.memory_bytes(), ReadHostInfo().memory_bytes);
}

TEST(DiscoverLocalNode, SlowdownDividesMeasuredSpeed) {
  // The speed is given, not measured: two calibrations of a loaded machine
  // differ by more than any bound a ratio test could use.
  LocalNodeOptions o;
  o.node_id = "n";
  o.cpu_cores = 1;
  o.discover_cuda = false;
  CpuSpeed given;
  given.gemm_flops_per_s = 8e10;
  given.memory_bandwidth_bytes_per_s = 2e10;
  o.cpu_speed = given;
  auto fast = DiscoverLocalNode(o);
  o.compute_slowdown = 4;
  auto slow = DiscoverLocalNode(o);
  ASSERT_THAT(fast, IsOk());
  ASSERT_THAT(slow, IsOk());
  EXPECT_DOUBLE_EQ(fast->devices(0).measured_gemm_flops_per_s(), 8e10);
  EXPECT_DOUBLE_EQ(slow->devices(0).measured_gemm_flops_per_s(), 2e10);
  // Memory bandwidth is not slowed: the slowdown emulates slower kernels.
  EXPECT_DOUBLE_EQ(slow->devices(0).memory_bandwidth_bytes_per_s(), 2e10);
  EXPECT_EQ(slow->devices(0).compute_slowdown(), 4);
}

TEST(DiscoverLocalNode, CpuMemoryCapIsSplitOverTheDevicesAndBoundedByTheHosts) {
  LocalNodeOptions o;
  o.node_id = "n";
  o.cpu_cores = 2;
  o.cpu_devices = 2;
  o.discover_cuda = false;
  o.cpu_speed = CpuSpeed{8e10, 2e10};
  o.cpu_memory_bytes = int64_t{3} << 30;
  if (ReadHostInfo().cores < 2) GTEST_SKIP() << "needs 2 cores for 2 devices";
  auto capped = DiscoverLocalNode(o);
  ASSERT_THAT(capped, IsOk());
  EXPECT_EQ(capped->devices(0).memory_bytes(), int64_t{3} << 29);
  EXPECT_EQ(capped->devices(1).memory_bytes(), int64_t{3} << 29);
  o.cpu_memory_bytes = ReadHostInfo().memory_bytes + (int64_t{1} << 20);
  EXPECT_THAT(DiscoverLocalNode(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("but the host has")));
}

TEST(DiscoverLocalNode, ImpossibleOptions_InvalidArgument) {
  LocalNodeOptions o;
  o.node_id = "n";
  o.cpu_cores = 1;
  o.cpu_devices = 2;
  o.discover_cuda = false;
  EXPECT_THAT(DiscoverLocalNode(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("core(s) are available")));
  o.cpu_devices = 0;
  EXPECT_THAT(DiscoverLocalNode(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no devices")));
  o.cpu_devices = 1;
  o.compute_slowdown = 0.5;
  EXPECT_THAT(DiscoverLocalNode(o), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CudaDevices, LanesPerSmKnownForSupportedGenerations) {
  EXPECT_EQ(Fp32LanesPerSm(7, 0), 64);
  EXPECT_EQ(Fp32LanesPerSm(8, 0), 64);
  EXPECT_EQ(Fp32LanesPerSm(8, 6), 128);
  EXPECT_EQ(Fp32LanesPerSm(9, 0), 128);
  EXPECT_EQ(Fp32LanesPerSm(3, 5), 0);
}

TEST(CudaDevices, GpusOfferTheirMemoryLessTheReserve) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_THAT(GpuMemoryOffered("n/gpu:0", 80 * kGiB, kGiB), IsOkAndHolds(79 * kGiB));
  EXPECT_THAT(GpuMemoryOffered("n/gpu:0", 16 * kGiB, 0), IsOkAndHolds(16 * kGiB));
  EXPECT_THAT(GpuMemoryOffered("n/gpu:1", 4 * kGiB, 4 * kGiB),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("n/gpu:1"), HasSubstr("4096 MiB of memory"),
                             HasSubstr("gpu_memory_reserve_mb"))));
  EXPECT_THAT(GpuMemoryOffered("n/gpu:0", 16 * kGiB, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
}

TEST(CudaDevices, WithoutGpu_ReportsWhyInsteadOfCrashing) {
  auto gpus = DiscoverCudaDevices();
  if (gpus.ok()) {
    GTEST_SKIP() << "a GPU is present: " << gpus->size() << " device(s)";
  }
  EXPECT_FALSE(gpus.status().message().empty());
}

}  // namespace
}  // namespace quilt
