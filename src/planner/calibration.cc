#include "src/planner/calibration.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cluster/topology.h"
#include "src/common/status.h"
#include "src/cost/cost_model.h"
#include "src/planner/baselines.h"
#include "src/planner/lower.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

absl::StatusOr<Topology> OneDevice(const quilt::v1::Device& device) {
  quilt::v1::ClusterSpec spec;
  spec.set_name("one-device");
  auto* node = spec.add_nodes();
  node->set_node_id(device.id().substr(0, device.id().find('/')));
  *node->add_devices() = device;
  return Topology::Build(spec);
}

quilt::v1::Strategy OneDeviceStrategy(const Graph& g, const Topology& topo) {
  return DataParallelStrategy(g, topo, {1}, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                              "one-device", kBucketBytes);
}

struct Simulated {
  double step_s = 0;
  int64_t peak_bytes = 0;
  int compute_instructions = 0;
};

absl::StatusOr<Simulated> SimulateOneDevice(const Graph& g, const quilt::v1::Device& device,
                                            int64_t rows) {
  ASSIGN_OR_RETURN(Topology topo, OneDevice(device));
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(&g, &topo));
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  ASSIGN_OR_RETURN(quilt::v1::DistributedProgram p,
                   LowerWithoutGraph(ix, OneDeviceStrategy(g, topo), topo, &cost, rows));
  ASSIGN_OR_RETURN(SimResult r, Simulate(p, g, topo, cost));
  Simulated out;
  out.step_s = r.step_time_s;
  for (const DeviceUsage& u : r.devices)
    out.peak_bytes = std::max(out.peak_bytes, u.peak_memory_bytes);
  for (const auto& d : p.devices()) {
    for (const auto& ins : d.instructions()) out.compute_instructions += ins.has_compute() ? 1 : 0;
  }
  return out;
}

}  // namespace

absl::StatusOr<quilt::v1::DistributedProgram> OneDeviceProgram(const Graph& g,
                                                               const quilt::v1::Device& device,
                                                               int64_t rows) {
  ASSIGN_OR_RETURN(Topology topo, OneDevice(device));
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(&g, &topo));
  return Lower(g, OneDeviceStrategy(g, topo), topo, &cost, rows);
}

absl::StatusOr<OneDevicePrediction> PredictOneDevice(const Graph& g,
                                                     const quilt::v1::Device& device,
                                                     int64_t rows) {
  ASSIGN_OR_RETURN(Simulated s, SimulateOneDevice(g, device, rows));
  return OneDevicePrediction{s.step_s, s.peak_bytes};
}

quilt::v1::Device Calibrated(const quilt::v1::Device& device, const DeviceCalibration& c) {
  quilt::v1::Device d = device;
  d.set_measured_gemm_flops_per_s(c.flops_per_s);
  d.set_efficiency(0);  // the measured rate, not a share of the peak
  d.set_measured_op_overhead_s(std::max(c.op_overhead_s, 1e-9));  // 0 would mean the default
  d.set_measured_step_overhead_s(c.step_overhead_s);
  d.clear_measured_op_type_rates();
  d.clear_op_times();
  return d;
}

absl::StatusOr<DeviceCalibration> FitCalibration(const Graph& g, const quilt::v1::Device& device,
                                                 const ProfileRun& large, const ProfileRun& small,
                                                 double max_flops_per_s) {
  if (large.rows == small.rows || large.rows <= 0 || small.rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("profile runs at ", large.rows, " and ",
                                                   small.rows, " rows: two row counts needed"));
  }
  if (large.compute_s <= 0 || small.compute_s <= 0 || large.step_s <= 0 || small.step_s <= 0) {
    return absl::InvalidArgumentError("profile runs without positive step and kernel times");
  }
  const ProfileRun& full = large.rows > small.rows ? large : small;
  const ProfileRun& half = large.rows > small.rows ? small : large;
  DeviceCalibration c;
  if (device.measured_gemm_flops_per_s() > 0) c.flops_per_s = device.measured_gemm_flops_per_s();
  c.op_overhead_s = 1e-6;
  for (int round = 0; round < 6; ++round) {
    // A rate past the bound (or past any device's) is handled below.
    if (!std::isfinite(c.flops_per_s) || c.flops_per_s > 1e17 ||
        (max_flops_per_s > 0 && c.flops_per_s > max_flops_per_s)) {
      break;
    }
    const quilt::v1::Device d = Calibrated(device, {c.flops_per_s, c.op_overhead_s, 0});
    ASSIGN_OR_RETURN(Simulated sf, SimulateOneDevice(g, d, full.rows));
    ASSIGN_OR_RETURN(Simulated sh, SimulateOneDevice(g, d, half.rows));
    const double vf = sf.step_s - sf.compute_instructions * c.op_overhead_s;
    const double vh = sh.step_s - sh.compute_instructions * c.op_overhead_s;
    double scale = vf > vh ? (full.compute_s - half.compute_s) / (vf - vh) : 0;
    double overhead =
        sf.compute_instructions > 0 ? (full.compute_s - vf * scale) / sf.compute_instructions : 0;
    if (scale <= 0 || overhead < 0) {
      overhead = 0;
      scale = half.compute_s / std::max(1e-12, vh);
    }
    c.flops_per_s /= scale;
    c.op_overhead_s = std::max(overhead, 1e-9);
  }
  if (!std::isfinite(c.flops_per_s) || c.flops_per_s <= 0 ||
      (max_flops_per_s > 0 && c.flops_per_s > max_flops_per_s)) {
    // Two runs that took about as long leave the rate almost no work to
    // explain: the rate alone, matched at the larger run.
    c.flops_per_s =
        device.measured_gemm_flops_per_s() > 0 ? device.measured_gemm_flops_per_s() : 5e10;
    c.op_overhead_s = 1e-9;
    for (int round = 0; round < 4; ++round) {
      // Past the bound it is refused below (and a device that fast is not
      // a valid one to simulate).
      if (!std::isfinite(c.flops_per_s) || c.flops_per_s > 1e17 ||
          (max_flops_per_s > 0 && c.flops_per_s > max_flops_per_s)) {
        break;
      }
      const quilt::v1::Device d = Calibrated(device, {c.flops_per_s, c.op_overhead_s, 0});
      ASSIGN_OR_RETURN(Simulated sf, SimulateOneDevice(g, d, full.rows));
      c.flops_per_s *= sf.step_s / full.compute_s;
    }
    if (!std::isfinite(c.flops_per_s) || c.flops_per_s <= 0 ||
        (max_flops_per_s > 0 && c.flops_per_s > max_flops_per_s)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the runs imply %.3g FLOP/s, beyond the %.3g the device can reach",
                          c.flops_per_s, max_flops_per_s));
    }
  }
  c.step_overhead_s = std::max(0.0, half.step_s - half.compute_s);
  return c;
}

}  // namespace quilt
