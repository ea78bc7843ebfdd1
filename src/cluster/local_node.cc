#include "src/cluster/local_node.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cluster/cpu_calibration.h"
#include "src/cluster/cuda_devices.h"
#include "src/cluster/host_info.h"
#include "src/common/logging.h"
#include "src/common/status.h"

namespace quilt {
namespace {

// Fastest link speed of the host's non-loopback interfaces, from sysfs
// (Mbit/s); 0 when none reports one (e.g. virtual interfaces).
double NicBandwidthBytesPerS() {
  double best_mbit = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/sys/class/net", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename() == "lo") continue;
    std::ifstream in(it->path() / "speed");
    double mbit = 0;
    if (in >> mbit && mbit > best_mbit) best_mbit = mbit;
  }
  return best_mbit * 1e6 / 8.0;
}

}  // namespace

absl::StatusOr<quilt::v1::NodeInfo> DiscoverLocalNode(const LocalNodeOptions& options) {
  if (options.compute_slowdown < 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute_slowdown must be >= 1, got ", options.compute_slowdown));
  }
  const HostInfo host = ReadHostInfo();
  const int cores = options.cpu_cores > 0 ? std::min(options.cpu_cores, host.cores) : host.cores;
  if (options.cpu_cores > host.cores) {
    // (One configuration may serve machines of different sizes: a cap.)
    QLOG_WARN("cpu_cores={} but only {} core(s) are available: using {}", options.cpu_cores,
              host.cores, host.cores);
  }
  if (options.cpu_devices < 0 || options.cpu_devices > cores) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu_devices = %d, but only %d core(s) are available", options.cpu_devices, cores));
  }
  if (options.cpu_memory_bytes < 0 ||
      (host.memory_bytes > 0 && options.cpu_memory_bytes > host.memory_bytes)) {
    return absl::InvalidArgumentError(absl::StrFormat("cpu_memory_mb = %d, but the host has %d MiB",
                                                      options.cpu_memory_bytes >> 20,
                                                      host.memory_bytes >> 20));
  }
  const int64_t cpu_memory =
      options.cpu_memory_bytes > 0 ? options.cpu_memory_bytes : host.memory_bytes;
  quilt::v1::NodeInfo info;
  info.set_node_id(options.node_id);
  info.set_hostname(host.hostname);
  info.set_address(options.address);
  info.set_version(options.version);
  info.set_host_memory_bytes(host.memory_bytes);

  if (options.cpu_devices > 0) {
    const int per_device = cores / options.cpu_devices;
    // Measured with the threads the kernels will have: a device whose
    // executor runs one kernel thread is not as fast as all its cores.
    const int threads =
        options.kernel_threads > 0 ? std::min(options.kernel_threads, per_device) : per_device;
    if (!options.cpu_speed.has_value()) {
      QLOG_INFO("calibrating CPU devices={} cores_per_device={} kernel_threads={} duration_ms={}",
                options.cpu_devices, per_device, threads,
                absl::ToInt64Milliseconds(options.calibration));
    }
    const CpuSpeed speed = options.cpu_speed.has_value()
                               ? *options.cpu_speed
                               : MeasureCpuSpeed(threads, options.calibration);
    const double gemm = speed.gemm_flops_per_s / options.compute_slowdown;
    QLOG_INFO("CPU {} gemm_gflops={:.1f} memory_gbytes_per_s={:.1f} slowdown={}",
              options.cpu_speed.has_value() ? "speed given" : "calibration",
              speed.gemm_flops_per_s / 1e9, speed.memory_bandwidth_bytes_per_s / 1e9,
              options.compute_slowdown);
    for (int i = 0; i < options.cpu_devices; ++i) {
      quilt::v1::Device* d = info.add_devices();
      d->set_id(absl::StrCat(options.node_id, "/cpu:", i));
      d->set_kind(quilt::v1::DEVICE_KIND_CPU);
      d->set_model(host.cpu_model);
      d->set_index(i);
      d->set_cores(per_device);
      d->set_measured_gemm_flops_per_s(gemm);
      d->set_memory_bandwidth_bytes_per_s(speed.memory_bandwidth_bytes_per_s / options.cpu_devices);
      d->set_memory_bytes(cpu_memory / options.cpu_devices);
      d->set_compute_slowdown(options.compute_slowdown);
    }
    // CPU devices of one host exchange tensors through shared memory.
    info.mutable_intra_node_link()->set_kind("shm");
    info.mutable_intra_node_link()->set_bandwidth_bytes_per_s(speed.memory_bandwidth_bytes_per_s /
                                                              2);
    info.mutable_intra_node_link()->set_latency_s(5e-6);
  }

  if (options.discover_cuda) {
    absl::StatusOr<std::vector<CudaDeviceInfo>> gpus = DiscoverCudaDevices();
    if (!gpus.ok()) {
      QLOG_INFO("no GPU found: {}", std::string(gpus.status().message()));
    } else if (gpus->empty()) {
      QLOG_INFO("no GPU found: the CUDA runtime reports 0 devices");
    } else {
      for (const CudaDeviceInfo& g : *gpus) {
        const std::string id = absl::StrCat(options.node_id, "/gpu:", g.ordinal);
        ASSIGN_OR_RETURN(const int64_t offered,
                         GpuMemoryOffered(id, g.memory_bytes, options.gpu_memory_reserve_bytes));
        quilt::v1::Device* d = info.add_devices();
        d->set_id(id);
        d->set_kind(quilt::v1::DEVICE_KIND_GPU);
        d->set_model(g.name);
        d->set_index(g.ordinal);
        d->set_memory_bytes(offered);
        d->set_multiprocessors(g.multiprocessors);
        d->set_compute_capability(absl::StrCat(g.cc_major, ".", g.cc_minor));
        d->set_peak_fp32_flops_per_s(g.peak_fp32_flops_per_s / options.compute_slowdown);
        d->set_memory_bandwidth_bytes_per_s(g.memory_bandwidth_bytes_per_s);
        d->set_compute_slowdown(options.compute_slowdown);
        QLOG_INFO(
            "GPU found ordinal={} name=\"{}\" memory_gib={:.1f} offered_gib={:.1f} sms={} cc={}.{}",
            g.ordinal, g.name, g.memory_bytes / double(1 << 30), offered / double(1 << 30),
            g.multiprocessors, g.cc_major, g.cc_minor);
      }
    }
  }
  if (info.devices_size() == 0) {
    return absl::InvalidArgumentError("no devices to offer: cpu_devices = 0 and no GPU found");
  }
  const double nic = NicBandwidthBytesPerS();
  if (nic > 0) {
    info.mutable_nic()->set_kind("ethernet");
    info.mutable_nic()->set_bandwidth_bytes_per_s(nic);
  }
  return info;
}

}  // namespace quilt
