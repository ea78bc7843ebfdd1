// Training throughput of quilt-executor processes on this host, and the
// simulator's fidelity against it. For each fixture model, five rounds of:
//   1. one process (one CPU device) trains K steps at the global batch and
//      at the per-replica batch, alone (the one-process throughput);
//   2. two independent one-process runs at once, as the two devices of the
//      two-process run share this host, at both batch sizes: they calibrate
//      the cost model's devices (the time in kernels at the two batch sizes
//      gives a device's FLOP rate and its fixed time per op, the rest of the
//      step its host time per step). Processes that run at once are pinned
//      to a CPU each (--cpus), the same in calibration and measurement: the
//      CPUs of a virtual machine may differ in speed, and each device is
//      calibrated on its own; the link is given the bandwidth, latency
//      and transport wake-up measured by comm_bench (--link-bytes-per-s,
//      --link-latency-s, --transport-wakeup-s);
//   3. two processes (two devices, one per process, data parallel with a
//      ring all-reduce) train the same global batch, right after their
//      calibration, and the simulator predicts their step from it: split
//      evenly, and split as the planner's dp-proportional baseline splits
//      it for the calibrated devices (run only where that differs), and
//      split evenly with gradients in small buckets, larger ones summed in
//      slices (--slice-bytes, as the planner's bucket variants run them);
//   4. the calibration's two runs at once at the per-replica batch again:
//      a round whose machine changed by more than 10 % meanwhile is run
//      again (at most five times per model; the count is reported).
// The round with the median error is reported (for each split), with every
// round's error, and the most memory each process's device held against
// the simulator's peak for it (the even split).
// Measured and simulated timelines of the two-process run are written as
// Chrome traces with --trace-dir. With --pipeline K, instead: the
// forward ops in two stages, one per process, as K micro-batches, one at
// a time against two in flight (pipelined), measured five times each,
// alternating, and predicted from the devices calibrated as in step 2,
// with the most each process held in a step against its simulated peak.
// Run from the runfiles directory (bazel run). Prints one JSON object per
// line.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "src/cluster/topology.h"
#include "src/common/cpu_affinity.h"
#include "src/common/status.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/planner/baselines.h"
#include "src/planner/calibration.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/runtime/comm/ucx_transport.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/npy.h"
#include "src/sim/simulator.h"
#include "src/testing/subprocess.h"

namespace quilt {
namespace {

using testing::Subprocess;

struct Options {
  int64_t steps = 30;  // at least; more where steps are short (min_run_s)
  int64_t warmup = 5;
  double min_run_s = 0.5;
  double link_bytes_per_s = 1e9;
  double link_latency_s = 30e-6;
  // Extra latency of a message that finds the receiver's transport asleep.
  double transport_wakeup_s = 0;
  std::string trace_dir;
  std::string work_dir;
  std::string data;  // --data of the executors
  // Where processes share this host, process i of a run is pinned to
  // cpus[i % cpus.size()] (empty: not pinned).
  std::vector<int> cpus;
  // The even split is also run with gradients in buckets of this many
  // bytes, larger ones summed in slices of it, as the planner's bucket
  // variants do (0: not run).
  int64_t slice_bytes = 256 << 10;
  // Instead of the data-parallel rounds: the forward ops in two stages,
  // one per process, as this many micro-batches, one at a time and two in
  // flight (0: not run).
  int pipeline_micro_batches = 0;
};

// The run's samples (the seeded synthetic set) as NumPy files, so that the
// executors read data rather than generate it.
absl::Status WriteData(const Graph& g, int64_t samples, const std::string& dir, Options* o) {
  ASSIGN_OR_RETURN(DataSignature sig, DataSignatureOf(g));
  ASSIGN_OR_RETURN(std::unique_ptr<Dataset> d, MakeSyntheticDataset(g, sig, 0));
  std::vector<Tensor> xs;
  Tensor y;
  RETURN_IF_ERROR(d->Batch(0, samples, &xs, &y));
  o->data.clear();
  for (size_t j = 0; j < xs.size(); ++j) {
    const std::string path = absl::StrCat(dir, "/x", j, ".npy");
    RETURN_IF_ERROR(WriteNpy(path, xs[j]));
    absl::StrAppend(&o->data, path, ",");
  }
  RETURN_IF_ERROR(WriteNpy(dir + "/y.npy", y));
  absl::StrAppend(&o->data, dir, "/y.npy");
  return absl::OkStatus();
}

// The device as calibrated from one-process runs.
using Calibration = DeviceCalibration;

// One node per device, each device as calibrated.
quilt::v1::ClusterSpec Cluster(const std::vector<Calibration>& devices, const Options& o) {
  quilt::v1::ClusterSpec spec;
  spec.set_name("loopback");
  for (size_t n = 0; n < devices.size(); ++n) {
    const Calibration& c = devices[n];
    auto* node = spec.add_nodes();
    node->set_node_id(absl::StrCat("w", n));
    node->mutable_nic()->set_bandwidth_bytes_per_s(o.link_bytes_per_s);
    node->mutable_nic()->set_latency_s(o.link_latency_s);
    node->mutable_nic()->set_kind("loopback");
    auto* dev = node->add_devices();
    dev->set_id(absl::StrCat("w", n, "/cpu:0"));
    dev->set_kind(quilt::v1::DEVICE_KIND_CPU);
    dev->set_measured_gemm_flops_per_s(c.flops_per_s);
    dev->set_measured_op_overhead_s(c.op_overhead_s);
    dev->set_measured_step_overhead_s(c.step_overhead_s);
    dev->set_measured_transport_wakeup_s(o.transport_wakeup_s);
    dev->set_measured_transport_spin_s(kUcxSpinSeconds);
    dev->set_memory_bytes(int64_t{8} << 30);
  }
  return spec;
}

struct Planned {
  quilt::v1::DistributedProgram program;
  SimResult sim;
  Topology topo;
  std::vector<int64_t> rows;  // the batch split's weights per device
};

// Data parallel over the calibrated devices, the batch split evenly or, with
// `proportional`, as the planner's dp-proportional baseline splits it (the
// slowest device's computation smallest, from the calibrated speeds);
// gradients in DDP's 25 MiB buckets, or with `slice_bytes` > 0 in buckets
// of that size, larger gradients summed in slices of it.
absl::StatusOr<Planned> PlanDataParallel(const Graph& g, const std::vector<Calibration>& devices,
                                         int64_t batch, const Options& o, bool proportional = false,
                                         int64_t slice_bytes = 0) {
  Planned p;
  const int nodes = static_cast<int>(devices.size());
  ASSIGN_OR_RETURN(p.topo, Topology::Build(Cluster(devices, o)));
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(&g, &p.topo));
  p.rows.assign(nodes, 1);
  if (proportional) {
    ASSIGN_OR_RETURN(RowLoadModel load, RowLoadModel::Fit(g, cost, p.topo, batch));
    ASSIGN_OR_RETURN(p.rows, ProportionalSplit(load, p.topo, batch));
  }
  quilt::v1::Strategy s =
      DataParallelStrategy(g, p.topo, p.rows, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                           proportional ? "proportional-ring" : "even-ring",
                           slice_bytes > 0 ? slice_bytes : kBucketBytes);
  for (auto& a : *s.mutable_aggregations()) a.set_partition_bytes(slice_bytes);
  ASSIGN_OR_RETURN(p.program, Lower(g, s, p.topo, &cost, batch));
  SimOptions so;
  so.trace = true;
  ASSIGN_OR_RETURN(p.sim, Simulate(p.program, g, p.topo, cost, so));
  return p;
}

// The forward ops in two stages of like op counts, stage d on device d
// alone (testing::Stages), as `micro_batches` micro-batches with `in_flight` in flight.
absl::StatusOr<Planned> PlanStages(const Graph& g, const std::vector<Calibration>& devices,
                                   int64_t batch, const Options& o, int micro_batches,
                                   int in_flight) {
  Planned p;
  ASSIGN_OR_RETURN(p.topo, Topology::Build(Cluster(devices, o)));
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(&g, &p.topo));
  p.rows.assign(devices.size(), 1);
  quilt::v1::Strategy s = testing::Stages(g, p.topo, {0, 1});
  s.set_micro_batches(micro_batches);
  s.set_micro_batches_in_flight(in_flight);
  ASSIGN_OR_RETURN(p.program, Lower(g, s, p.topo, &cost, batch));
  ASSIGN_OR_RETURN(p.sim, Simulate(p.program, g, p.topo, cost));
  return p;
}

// Medians over the steps after warm-up: the step time and the time in
// kernels (each the largest over the processes).
struct Measured {
  double step_s = 0;
  double compute_s = 0;
  // Each process's own medians.
  std::vector<double> step_per_process_s, compute_per_process_s;
  // Each process's most bytes of tensors on its device in any step.
  std::vector<int64_t> peak_per_process_bytes;

  // The figures of process i alone.
  Measured Process(size_t i) const {
    Measured m;
    m.step_s = step_per_process_s[i];
    m.compute_s = compute_per_process_s[i];
    m.step_per_process_s = {m.step_s};
    m.compute_per_process_s = {m.compute_s};
    return m;
  }
};

// The simulated peak memory of each device, in the program's order (one
// process each).
std::vector<int64_t> PeaksOf(const SimResult& sim) {
  std::vector<int64_t> out;
  for (const DeviceUsage& u : sim.devices) out.push_back(u.peak_memory_bytes);
  return out;
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs one executor per node; with `copies` > 1, that many independent
// runs of the program at once (each its own world), as devices that share
// this host run while the others are busy too.
absl::StatusOr<Measured> Measure(const Planned& p, const std::string& tag, const Options& o,
                                 int copies = 1) {
  static int runs = 0;  // a fresh directory (and rendezvous) per run
  std::vector<std::string> world;
  for (int n = 0; n < p.topo.num_nodes(); ++n) world.push_back(p.topo.node_id(n));
  std::vector<Subprocess> procs;
  std::vector<std::string> outs, logs;
  for (int copy = 0; copy < copies; ++copy) {
    const std::string base = absl::StrCat(o.work_dir, "/", tag, "-", ++runs);
    std::filesystem::create_directories(base + "/rdv");
    {
      std::ofstream out(base + "/program.pb", std::ios::binary);
      out << p.program.SerializeAsString();
    }
    for (size_t r = 0; r < world.size(); ++r) {
      std::vector<std::string> argv = {"src/runtime/quilt-executor",
                                       "--program",
                                       base + "/program.pb",
                                       "--world",
                                       absl::StrJoin(world, ","),
                                       "--rank",
                                       std::to_string(r),
                                       "--rendezvous",
                                       base + "/rdv",
                                       "--steps",
                                       std::to_string(o.steps),
                                       "--out",
                                       absl::StrCat(base, "/out", r),
                                       "--data",
                                       o.data};
      const size_t index = procs.size();
      if (!o.cpus.empty() && copies * world.size() > 1) {
        argv.push_back("--cpus");
        argv.push_back(std::to_string(o.cpus[index % o.cpus.size()]));
      }
      // Every run traced alike (calibration and measurement pay the same
      // instrumentation).
      if (!o.trace_dir.empty()) {
        argv.push_back("--trace");
        argv.push_back(absl::StrCat(o.trace_dir, "/", tag,
                                    copies > 1 ? absl::StrCat("_copy", copy) : "", "_rank", r,
                                    "_measured.json"));
      }
      ASSIGN_OR_RETURN(Subprocess proc, Subprocess::Start(argv, absl::StrCat(base, "/log", r)));
      procs.push_back(std::move(proc));
      outs.push_back(absl::StrCat(base, "/out", r));
      logs.push_back(absl::StrCat(base, "/log", r));
    }
  }
  std::vector<double> steps(static_cast<size_t>(o.steps), 0), compute(steps.size(), 0);
  const int64_t skip = std::min<int64_t>(o.warmup, o.steps - 1);
  Measured result;
  for (size_t r = 0; r < procs.size(); ++r) {
    std::optional<int> st = procs[r].Wait(absl::Minutes(10));
    if (!st.has_value() || *st != 0) {
      std::ifstream log(logs[r]);
      std::stringstream text;
      text << log.rdbuf();
      return absl::InternalError(absl::StrCat("executor ", r, " failed: ", text.str()));
    }
    std::ifstream m(outs[r] + "/metrics.json");
    const nlohmann::json metrics = nlohmann::json::parse(m);
    // A step ends when its slowest process ends it.
    std::vector<double> own_step, own_compute;
    for (size_t k = 0; k < steps.size(); ++k) {
      steps[k] = std::max(steps[k], metrics["step_times_s"][k].get<double>());
      compute[k] = std::max(compute[k], metrics["compute_times_s"][k].get<double>());
      if (static_cast<int64_t>(k) >= skip) {
        own_step.push_back(metrics["step_times_s"][k].get<double>());
        own_compute.push_back(metrics["compute_times_s"][k].get<double>());
      }
    }
    int64_t peak = 0;
    for (const auto& b : metrics.value("peak_bytes", nlohmann::json::array())) {
      peak = std::max(peak, b.get<int64_t>());
    }
    result.peak_per_process_bytes.push_back(peak);
    result.step_per_process_s.push_back(MedianOf(own_step));
    result.compute_per_process_s.push_back(MedianOf(own_compute));
  }
  result.step_s = MedianOf({steps.begin() + skip, steps.end()});
  result.compute_s = MedianOf({compute.begin() + skip, compute.end()});
  return result;
}

// The calibration that makes the simulated one-device kernel time match
// the measured one at both batch sizes (calibration.h).
absl::StatusOr<Calibration> Calibrate(const Graph& g, int64_t full, const Measured& at_full,
                                      int64_t half, const Measured& at_half, const Options& o) {
  const quilt::v1::Device device = Cluster({Calibration{}}, o).nodes(0).devices(0);
  return FitCalibration(g, device, {full, at_full.step_s, at_full.compute_s},
                        {half, at_half.step_s, at_half.compute_s});
}

// Of `cpus`, the first on each physical core (hardware threads of one core
// would make two devices share it); CPUs whose topology is unknown count
// as cores of their own.
std::vector<int> OneCpuPerCore(const std::vector<int>& cpus) {
  std::vector<int> out;
  std::set<std::string> cores;
  for (int c : cpus) {
    std::ifstream in(
        absl::StrCat("/sys/devices/system/cpu/cpu", c, "/topology/thread_siblings_list"));
    std::string siblings;
    if (!(in >> siblings)) siblings = absl::StrCat("cpu", c);
    if (cores.insert(siblings).second) out.push_back(c);
  }
  return out;
}

// Executor processes of the data-parallel run (one device each).
constexpr int kProcesses = 2;
// Rounds of calibration and measurement per model (odd: a median round).
constexpr int kRounds = 5;
// A round whose calibration, run again after the measurement, moved by
// more than this is run again, at most kMaxDiscarded times per model.
constexpr double kMaxDrift = 0.1;
constexpr int kMaxDiscarded = 5;

// The fixture's training graph (SGD with momentum), its data written for
// the executors (o->data).
absl::StatusOr<Graph> Prepare(const std::string& name, int64_t batch, Options* o) {
  ASSIGN_OR_RETURN(Graph g, LoadModel("test/fixtures/" + name + "/model.onnx", batch));
  TrainingOptions to;
  if (g.loss.type == LossType::kNone) to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  to.optimizer.learning_rate = 0.05;
  to.optimizer.momentum = 0.9;
  RETURN_IF_ERROR(BuildTrainingGraph(&g, to));
  const std::string data_dir = o->work_dir + "/" + name + "_data";
  std::filesystem::create_directories(data_dir);
  RETURN_IF_ERROR(WriteData(g, batch * o->steps, data_dir, o));
  return g;
}

// Two stages over the two processes as micro-batches, one at a time and
// two in flight, each measured kRounds times, alternating, right after
// the devices are calibrated as for the data-parallel runs; the medians
// against the simulator's predictions from that calibration.
absl::Status BenchPipeline(const std::string& name, int64_t batch, Options o) {
  ASSIGN_OR_RETURN(Graph g, Prepare(name, batch, &o));
  const int k = o.pipeline_micro_batches;
  const int64_t micro = (batch + k - 1) / k;
  ASSIGN_OR_RETURN(Planned one, PlanDataParallel(g, {Calibration{}}, micro, o));
  ASSIGN_OR_RETURN(Planned one_half, PlanDataParallel(g, {Calibration{}}, micro / 2, o));
  ASSIGN_OR_RETURN(const Measured co_full, Measure(one, name + "_cal", o, kProcesses));
  ASSIGN_OR_RETURN(const Measured co_half, Measure(one_half, name + "_cal_half", o, kProcesses));
  std::vector<Calibration> cal;
  for (int d = 0; d < kProcesses; ++d) {
    const bool own = !o.cpus.empty();
    ASSIGN_OR_RETURN(Calibration c, Calibrate(g, micro, own ? co_full.Process(d) : co_full,
                                              micro / 2, own ? co_half.Process(d) : co_half, o));
    cal.push_back(c);
  }
  ASSIGN_OR_RETURN(const Planned serial, PlanStages(g, cal, batch, o, k, 1));
  ASSIGN_OR_RETURN(const Planned piped, PlanStages(g, cal, batch, o, k, 2));
  std::vector<double> serial_s, piped_s, gains;
  // The most each process held in a step over the rounds.
  std::vector<int64_t> serial_held(kProcesses, 0), piped_held(kProcesses, 0);
  for (int r = 0; r < kRounds; ++r) {
    ASSIGN_OR_RETURN(const Measured a, Measure(serial, absl::StrCat(name, "_serial", r), o));
    ASSIGN_OR_RETURN(const Measured b, Measure(piped, absl::StrCat(name, "_in_flight", r), o));
    serial_s.push_back(a.step_s);
    piped_s.push_back(b.step_s);
    gains.push_back(a.step_s / b.step_s);
    for (size_t d = 0; d < a.peak_per_process_bytes.size() && d < serial_held.size(); ++d)
      serial_held[d] = std::max(serial_held[d], a.peak_per_process_bytes[d]);
    for (size_t d = 0; d < b.peak_per_process_bytes.size() && d < piped_held.size(); ++d)
      piped_held[d] = std::max(piped_held[d], b.peak_per_process_bytes[d]);
  }
  std::cout << nlohmann::json{{"bench", "executor_pipeline"},
                              {"model", name},
                              {"global_batch", batch},
                              {"micro_batches", k},
                              {"steps", o.steps},
                              {"pinned_cpus", o.cpus},
                              {"one_at_a_time_step_s", MedianOf(serial_s)},
                              {"two_in_flight_step_s", MedianOf(piped_s)},
                              {"measured_gain", MedianOf(gains)},
                              {"round_gains", gains},
                              {"predicted_one_at_a_time_step_s", serial.sim.step_time_s},
                              {"predicted_two_in_flight_step_s", piped.sim.step_time_s},
                              {"predicted_gain", serial.sim.step_time_s / piped.sim.step_time_s},
                              {"one_at_a_time_peak_bytes", serial_held},
                              {"predicted_one_at_a_time_peak_bytes", PeaksOf(serial.sim)},
                              {"two_in_flight_peak_bytes", piped_held},
                              {"predicted_two_in_flight_peak_bytes", PeaksOf(piped.sim)}}
                   .dump()
            << std::endl;
  return absl::OkStatus();
}

absl::Status BenchModel(const std::string& name, int64_t batch, Options o) {
  ASSIGN_OR_RETURN(Graph g, Prepare(name, batch, &o));
  // One process at the global batch and at the per-replica batch of the
  // two-process run: the calibration.
  const int64_t half = batch / kProcesses;
  ASSIGN_OR_RETURN(Planned one, PlanDataParallel(g, {Calibration{}}, batch, o));
  ASSIGN_OR_RETURN(Planned one_half, PlanDataParallel(g, {Calibration{}}, half, o));
  // Short steps are counted over more of them, so that a run lasts long
  // enough for the machine's hiccups to stay out of the median (the data
  // wraps around).
  ASSIGN_OR_RETURN(const Measured probe, Measure(one, name + "_probe", o));
  if (probe.step_s > 0) {
    o.steps = std::max(
        o.steps,
        std::min<int64_t>(static_cast<int64_t>(std::ceil(o.min_run_s / probe.step_s)), 1000));
  }
  // The two devices share this host's cores, so each is measured while
  // the other runs too: two independent one-process runs at once, at both
  // batch sizes. The machine's other load changes within minutes, so each
  // round calibrates and then measures the two-process run right after,
  // and predicts it from its own calibration; the round with the median
  // error is reported (all rounds' errors too). The one-process figures
  // for throughput run alone, the faster of the rounds kept.
  struct Round {
    Measured co_full, co_half, two, prop, sliced;
    std::vector<Calibration> cal;          // per device
    Planned plan, prop_plan, sliced_plan;  // even and proportional splits; even in slices
    double error = 0, prop_error = 0, sliced_error = 0;
    double drift = 0;  // of the calibration run repeated after the measurement
  };
  Measured m1, m1_half;
  std::vector<Round> rounds(kRounds);
  int discarded = 0;
  for (int r = 0; r < kRounds;) {
    Round& x = rounds[r];
    ASSIGN_OR_RETURN(const Measured a, Measure(one, name + "_1proc", o));
    ASSIGN_OR_RETURN(const Measured b, Measure(one_half, name + "_1proc_half", o));
    if (r == 0 || a.step_s < m1.step_s) m1 = a;
    if (r == 0 || b.step_s < m1_half.step_s) m1_half = b;
    ASSIGN_OR_RETURN(x.co_full, Measure(one, name + "_1proc_x2", o, kProcesses));
    ASSIGN_OR_RETURN(x.co_half, Measure(one_half, name + "_1proc_half_x2", o, kProcesses));
    // Pinned, each device is calibrated from the process that ran on its
    // CPU (the CPUs may differ in speed); unpinned, both from the slower
    // process of each step.
    x.cal.clear();
    if (o.cpus.empty()) {
      ASSIGN_OR_RETURN(Calibration c, Calibrate(g, batch, x.co_full, half, x.co_half, o));
      x.cal.assign(kProcesses, c);
    } else {
      for (int d = 0; d < kProcesses; ++d) {
        ASSIGN_OR_RETURN(Calibration c,
                         Calibrate(g, batch, x.co_full.Process(d), half, x.co_half.Process(d), o));
        x.cal.push_back(c);
      }
    }
    ASSIGN_OR_RETURN(x.plan, PlanDataParallel(g, x.cal, batch, o));
    ASSIGN_OR_RETURN(x.two, Measure(x.plan, absl::StrCat(name, "_2proc_round", r + 1), o));
    x.error = x.plan.sim.step_time_s / x.two.step_s - 1;
    // The split Quilt's planner would choose for these devices: where the
    // two CPUs differ in speed, the faster takes more rows.
    ASSIGN_OR_RETURN(x.prop_plan, PlanDataParallel(g, x.cal, batch, o, /*proportional=*/true));
    if (x.prop_plan.rows[0] == x.prop_plan.rows[1]) {
      x.prop = x.two;  // the same program
    } else {
      ASSIGN_OR_RETURN(x.prop,
                       Measure(x.prop_plan, absl::StrCat(name, "_2proc_prop_round", r + 1), o));
    }
    x.prop_error = x.prop_plan.sim.step_time_s / x.prop.step_s - 1;
    if (o.slice_bytes > 0) {
      ASSIGN_OR_RETURN(x.sliced_plan,
                       PlanDataParallel(g, x.cal, batch, o, /*proportional=*/false, o.slice_bytes));
      ASSIGN_OR_RETURN(x.sliced,
                       Measure(x.sliced_plan, absl::StrCat(name, "_2proc_sliced_round", r + 1), o));
      x.sliced_error = x.sliced_plan.sim.step_time_s / x.sliced.step_s - 1;
    }
    // The calibration holds only while the machine's load does: it is run
    // again after the measurement, and a round whose machine changed
    // meanwhile is run again (a few times at most).
    ASSIGN_OR_RETURN(const Measured again,
                     Measure(one_half, name + "_1proc_half_x2_again", o, kProcesses));
    x.drift = again.step_s / x.co_half.step_s - 1;
    if (std::abs(x.drift) > kMaxDrift && discarded < kMaxDiscarded) {
      ++discarded;
      continue;
    }
    ++r;
  }
  // The round with the median of an error (each split from its own).
  auto median_round = [&](double Round::*error) {
    std::vector<int> order(kRounds);
    for (int r = 0; r < kRounds; ++r) order[r] = r;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return rounds[a].*error < rounds[b].*error; });
    return order[kRounds / 2];
  };
  const int median = median_round(&Round::error);
  const Round& chosen = rounds[median];
  const int prop_median = median_round(&Round::prop_error);
  const Round& prop = rounds[prop_median];
  const int sliced_median = median_round(&Round::sliced_error);
  const Round& sliced = rounds[sliced_median];
  std::vector<double> errors;
  // Per round: the even split's step over the proportional one's,
  // measured back to back.
  std::vector<double> drifts, prop_errors, prop_gains;
  // Per round: the even split in DDP's buckets over the same in slices,
  // measured back to back, and as the simulator predicted it.
  std::vector<double> sliced_errors, sliced_gains, sliced_predicted_gains;
  for (const Round& x : rounds) {
    errors.push_back(x.error);
    drifts.push_back(x.drift);
    prop_errors.push_back(x.prop_error);
    prop_gains.push_back(x.two.step_s / x.prop.step_s);
    if (o.slice_bytes > 0) {
      sliced_errors.push_back(x.sliced_error);
      sliced_gains.push_back(x.two.step_s / x.sliced.step_s);
      sliced_predicted_gains.push_back(x.plan.sim.step_time_s / x.sliced_plan.sim.step_time_s);
    }
  }
  const std::vector<Calibration>& cal = chosen.cal;
  std::vector<double> flops, op_overhead, step_overhead;
  for (const Calibration& c : cal) {
    flops.push_back(c.flops_per_s);
    op_overhead.push_back(c.op_overhead_s);
    step_overhead.push_back(c.step_overhead_s);
  }
  const Measured &co_full = chosen.co_full, &co_half = chosen.co_half, &m2 = chosen.two;
  const Planned& two = chosen.plan;
  ASSIGN_OR_RETURN(one, PlanDataParallel(g, {cal[0]}, batch, o));
  const double measured1 = m1.step_s, measured2 = m2.step_s;
  if (!o.trace_dir.empty()) {
    std::ofstream(absl::StrCat(o.trace_dir, "/", name, "_2proc_simulated.json"))
        << ChromeTraceJson(two.sim, two.topo, name + " two processes (simulated)");
    std::ofstream(absl::StrCat(o.trace_dir, "/", name, "_2proc_prop_simulated.json"))
        << ChromeTraceJson(prop.prop_plan.sim, prop.prop_plan.topo,
                           name + " two processes, proportional split (simulated)");
    for (int k = 0; k < kProcesses; ++k) {
      for (const std::string run : {"_2proc", "_2proc_prop"}) {
        std::error_code ignored;  // no proportional run where the split was even
        std::filesystem::copy_file(
            absl::StrCat(o.trace_dir, "/", name, run, "_round",
                         (run == "_2proc" ? median : prop_median) + 1, "_rank", k,
                         "_measured.json"),
            absl::StrCat(o.trace_dir, "/", name, run, "_rank", k, "_measured.json"),
            std::filesystem::copy_options::overwrite_existing, ignored);
      }
    }
  }
  std::cout << nlohmann::json{{"bench", "executor_data_parallel"},
                              {"model", name},
                              {"global_batch", batch},
                              {"steps", o.steps},
                              {"pinned_cpus", o.cpus},
                              {"calibrated_flops_per_s", flops},
                              {"calibrated_op_overhead_s", op_overhead},
                              {"measured_step_overhead_s", step_overhead},
                              {"one_process_compute_s", m1.compute_s},
                              {"one_process_half_batch_step_s", m1_half.step_s},
                              {"one_process_half_batch_compute_s", m1_half.compute_s},
                              {"two_at_once_compute_s", co_full.compute_s},
                              {"two_at_once_half_batch_compute_s", co_half.compute_s},
                              {"two_at_once_half_batch_step_s", co_half.step_s},
                              {"two_process_compute_s", m2.compute_s},
                              {"two_process_compute_per_process_s", m2.compute_per_process_s},
                              {"two_at_once_half_batch_compute_per_process_s",
                               co_half.compute_per_process_s},
                              {"one_process_step_s", measured1},
                              {"two_process_step_s", measured2},
                              {"one_process_samples_per_s", batch / measured1},
                              {"two_process_samples_per_s", batch / measured2},
                              {"speedup_two_vs_one", measured1 / measured2},
                              {"predicted_one_process_step_s", one.sim.step_time_s},
                              {"predicted_two_process_step_s", two.sim.step_time_s},
                              {"prediction_error", two.sim.step_time_s / measured2 - 1},
                              {"two_process_peak_bytes", m2.peak_per_process_bytes},
                              {"predicted_two_process_peak_bytes", PeaksOf(two.sim)},
                              {"round", median + 1},
                              {"round_prediction_errors", errors},
                              {"proportional_round", prop_median + 1},
                              {"proportional_rows", prop.prop_plan.rows},
                              {"proportional_two_process_step_s", prop.prop.step_s},
                              {"proportional_two_process_samples_per_s", batch / prop.prop.step_s},
                              {"proportional_speedup_vs_one", measured1 / prop.prop.step_s},
                              {"proportional_predicted_step_s", prop.prop_plan.sim.step_time_s},
                              {"proportional_prediction_error", prop.prop_error},
                              {"round_proportional_prediction_errors", prop_errors},
                              {"round_proportional_gains", prop_gains},
                              {"median_proportional_gain", MedianOf(prop_gains)},
                              {"slice_bytes", o.slice_bytes},
                              {"sliced_round", sliced_median + 1},
                              {"sliced_two_process_step_s", sliced.sliced.step_s},
                              {"sliced_predicted_step_s", sliced.sliced_plan.sim.step_time_s},
                              {"sliced_prediction_error", sliced.sliced_error},
                              {"round_sliced_prediction_errors", sliced_errors},
                              {"round_sliced_gains", sliced_gains},
                              {"round_sliced_predicted_gains", sliced_predicted_gains},
                              {"round_calibration_drifts", drifts},
                              {"rounds_discarded", discarded}}
                   .dump()
            << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace quilt

int main(int argc, char** argv) {
  CLI::App app("Executor throughput (1 vs 2 processes) and simulator fidelity");
  quilt::Options o;
  // The MLP's batch makes its steps last milliseconds: at 4096 rows a
  // two-process step is about 1 ms, of which a fifth is one thread
  // wake-up whose cost on a shared virtual machine ranges 0.03–0.3 ms
  // from run to run.
  std::string models = "mlp:16384,cnn:256,transformer:256";
  app.add_option("--models", models, "NAME:BATCH,... (fixtures under test/fixtures)");
  app.add_option("--steps", o.steps, "Steps per run")->check(CLI::Range(2, 100000));
  app.add_option("--warmup", o.warmup, "Steps left out of the median");
  app.add_option("--min-run-s", o.min_run_s,
                 "More steps per run where steps are short, so that a run lasts this long");
  app.add_option("--link-bytes-per-s", o.link_bytes_per_s,
                 "Measured all-reduce bus bandwidth between two processes (comm_bench)");
  app.add_option("--link-latency-s", o.link_latency_s,
                 "Measured one-way latency while the transports poll (comm_bench ping-pong)");
  app.add_option("--transport-wakeup-s", o.transport_wakeup_s,
                 "Measured extra latency when the receiver's transport sleeps (comm_bench: "
                 "after idle minus ping-pong)");
  app.add_option("--trace-dir", o.trace_dir, "Write measured and simulated Chrome traces here");
  app.add_option("--slice-bytes", o.slice_bytes,
                 "Also run the even split with gradients in buckets of this size, larger ones "
                 "summed in slices of it (0: not)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pipeline", o.pipeline_micro_batches,
                 "Instead: two stages over the two processes as this many micro-batches, one at "
                 "a time against two in flight, measured and predicted")
      ->check(CLI::NonNegativeNumber);
  bool no_pin = false;
  app.add_flag("--no-pin", no_pin,
               "Leave processes that run at once unpinned (calibrate both devices from the "
               "slower process of each step)");
  CLI11_PARSE(app, argc, argv);
  if (!no_pin) {
    absl::StatusOr<std::vector<int>> cpus = quilt::AllowedCpus();
    if (!cpus.ok()) {
      std::cerr << "executor_bench: " << cpus.status() << "\n";
      return 1;
    }
    const std::vector<int> cores = quilt::OneCpuPerCore(*cpus);
    if (cores.size() >= static_cast<size_t>(quilt::kProcesses)) o.cpus = cores;
  }
  char tmpl[] = "/tmp/quilt-executor-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  o.work_dir = tmpl;
  if (!o.trace_dir.empty()) std::filesystem::create_directories(o.trace_dir);
  int rc = 0;
  for (absl::string_view item : absl::StrSplit(models, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, ':');
    int64_t batch = 0;
    if (!absl::SimpleAtoi(kv.second, &batch) || batch < 2) {
      std::cerr << "executor_bench: bad --models entry '" << item << "'\n";
      return 2;
    }
    std::cerr << "executor_bench: " << kv.first << " (batch " << batch << ")\n";
    if (absl::Status s = o.pipeline_micro_batches > 0 ? quilt::BenchPipeline(kv.first, batch, o)
                                                      : quilt::BenchModel(kv.first, batch, o);
        !s.ok()) {
      std::cerr << "executor_bench: " << kv.first << ": " << s << "\n";
      rc = 1;
    }
  }
  std::filesystem::remove_all(o.work_dir);
  return rc;
}
