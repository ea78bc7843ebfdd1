#include "src/coordinator/job_submission.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cluster/topology.h"
#include "src/common/display_text.h"
#include "src/common/files.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/coordinator/checkpoint_dir.h"
#include "src/coordinator/job_model.h"
#include "src/coordinator/live_cluster.h"
#include "src/planner/accumulation.h"
#include "src/planner/memory_floor.h"
#include "src/planner/plan.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/label_range.h"

namespace quilt {
namespace {

absl::Status CheckDataset(const quilt::v1::JobSpec& spec, const Graph& graph) {
  absl::StatusOr<DataSignature> sig = DataSignatureOf(graph);
  if (!sig.ok()) return Annotate(sig.status(), "the model's data");
  if (spec.dataset().source_case() != quilt::v1::DatasetSpec::kNumpy) {
    // Synthetic: what the executors will make must be possible to make.
    absl::StatusOr<std::unique_ptr<Dataset>> data =
        MakeSyntheticDataset(graph, *sig, spec.dataset().synthetic_seed());
    if (!data.ok()) {
      return Annotate(data.status(), "synthetic data for this model (pass --data X.npy,Y.npy)");
    }
    return absl::OkStatus();
  }
  const auto& files = spec.dataset().numpy();
  if (files.inputs_path().empty() || files.labels_path().empty()) {
    return absl::InvalidArgumentError("the dataset needs both an inputs and a labels file");
  }
  std::vector<std::string> inputs = {files.inputs_path()};
  inputs.insert(inputs.end(), files.more_inputs_paths().begin(), files.more_inputs_paths().end());
  absl::StatusOr<std::unique_ptr<Dataset>> data =
      OpenNumpyDataset(inputs, files.labels_path(), *sig);
  if (!data.ok()) return Annotate(data.status(), "the dataset");
  RETURN_IF_ERROR(Annotate(CheckLabelRange(graph, *sig, files.labels_path()), "the dataset"));
  if ((*data)->size() < spec.global_batch()) {
    return absl::InvalidArgumentError(absl::StrCat("the dataset has ", (*data)->size(),
                                                   " samples, fewer than one global batch of ",
                                                   spec.global_batch()));
  }
  return absl::OkStatus();
}

// The job as the log names it.
std::string JobLabel(const quilt::v1::JobSpec& spec) {
  return spec.name().empty() ? std::string("a job without a name") : "job '" + spec.name() + "'";
}

// The plan of the job on `cluster` shared with the jobs on it, with the
// checks every plan must pass. `lock` is held while planning (null: none,
// or the caller holds it); `shared` (optional) gets ShareBusyNodes' lines.
absl::StatusOr<PlanResult> PlanOn(const quilt::v1::JobSpec& spec, const Graph& graph,
                                  quilt::v1::ClusterSpec cluster, const std::string& strategy,
                                  const SubmissionOptions& options,
                                  const std::map<std::string, NodeLoad>& loads,
                                  const std::set<std::string>& measured_loaded, absl::Mutex* lock,
                                  std::vector<std::string>* shared = nullptr,
                                  bool fit_check_only = false) {
  std::vector<std::string> lines = ShareBusyNodes(loads, measured_loaded, &cluster);
  if (shared != nullptr) *shared = std::move(lines);
  absl::StatusOr<Topology> topo = Topology::Build(cluster);
  if (!topo.ok()) return Annotate(topo.status(), "the live cluster");
  PlanOptions plan;
  plan.global_batch = spec.global_batch();
  plan.strategy = strategy == "auto" ? "all" : strategy;
  plan.search.time_budget_s = options.time_budget_s;
  plan.search.seed = spec.seed() == 0 ? 1 : spec.seed();
  plan.fit_check_only = fit_check_only;
  plan.program_with_graph = !fit_check_only;
  // Micro-batches (gradient accumulation) where the batch fits no plan on
  // idle nodes only: where other jobs hold part of the memory, the job
  // waits for room (or is refused) rather than run a part at a time;
  // never where the job's spec says so.
  plan.accumulate = !spec.no_micro_batches();
  for (const auto& [node, load] : loads) plan.accumulate &= load.jobs == 0;
  const absl::Time started = absl::Now();
  const std::string who = JobLabel(spec);
  plan.progress = [started, &who, after = options.log_progress_after](const std::string& line) {
    if (absl::Now() - started >= after) QLOG_INFO("planning {}: {}", who, line);
  };
  ASSIGN_OR_RETURN(PlanResult result, PlanHolding(lock, graph, *topo, plan));
  if (result.report.best().empty()) {
    std::string why;
    for (const auto& e : result.report.estimates()) {
      if (!e.infeasible_reason().empty()) {
        why = absl::StrCat(e.name(), ": ", e.infeasible_reason());
        break;
      }
    }
    std::string busy;
    for (const auto& [node, load] : loads) {
      if (load.jobs > 0) absl::StrAppend(&busy, busy.empty() ? "" : ", ", node);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "no ", strategy == "auto" ? "strategy" : "'" + strategy + "' plan",
        " fits the memory of the Ready nodes' devices", why.empty() ? "" : " (", why,
        why.empty() ? "" : ")",
        busy.empty() ? "" : "; the jobs running on " + busy + " hold part of it",
        result.report.hybrid_batch_limit() > result.report.data_parallel_batch_limit()
            ? absl::StrCat("; a global batch of ", result.report.hybrid_batch_limit(),
                           " fits (the planner's closest plan, simulated in full)")
        : result.report.data_parallel_batch_limit() > 0
            ? absl::StrCat("; a global batch of ", result.report.data_parallel_batch_limit(),
                           result.report.memory_floor().devices() < 2
                               ? " fits (on the one device, planned in full)"
                               : " fits (data parallelism, planned in full)")
        : result.report.data_parallel_batch_unchecked() > 0
            ? absl::StrCat("; by the memory model a global batch of about ",
                           result.report.data_parallel_batch_unchecked(),
                           " fits (not planned in full: the planning time budget ended first)")
            : "",
        AboveTheMemoryFloor(result.report), AccumulationRefusedHint(result.report)));
  }
  // A baseline asked for by name splits the batch over every device it
  // names (the planner's own plans, by auto or heterog, run on the devices
  // that get rows).
  if (strategy != "auto" && strategy != "heterog") {
    for (const auto& group : result.best_program.strategy().groups()) {
      int replicas = 0;
      for (const auto& r : group.replicas()) replicas += r.replicas() > 0 ? 1 : 0;
      if (spec.global_batch() < replicas) {
        return absl::InvalidArgumentError(absl::StrCat("a global batch of ", spec.global_batch(),
                                                       " cannot be split over the ", replicas,
                                                       " devices of ", strategy));
      }
    }
  }
  return result;
}

// Every speed figure of `d` divided by `k` (times multiplied).
void Slower(double k, quilt::v1::Device* d) {
  d->set_peak_fp32_flops_per_s(d->peak_fp32_flops_per_s() / k);
  d->set_measured_gemm_flops_per_s(d->measured_gemm_flops_per_s() / k);
  // The slowdown stretches memory-bound time and the default per-op
  // overhead; a measured overhead is stretched here.
  d->set_compute_slowdown(std::max(1.0, d->compute_slowdown()) * k);
  d->set_measured_op_overhead_s(d->measured_op_overhead_s() * k);
  d->set_measured_step_overhead_s(d->measured_step_overhead_s() * k);
  for (auto& r : *d->mutable_measured_op_type_rates()) r.set_flops_per_s(r.flops_per_s() / k);
  for (auto& t : *d->mutable_op_times()) t.set_time_s(t.time_s() * k);
}

}  // namespace

std::map<std::string, NodeLoad> NodeLoads(const std::vector<quilt::v1::JobStatus>& jobs) {
  std::map<std::string, NodeLoad> out;
  for (const quilt::v1::JobStatus& j : jobs) {
    if (JobManager::Ended(j.state())) continue;
    for (const std::string& node : j.nodes()) ++out[node].jobs;
    for (const auto& [node, bytes] : j.predicted_memory_bytes()) {
      if (j.predicted_device_memory_bytes().empty()) {
        out[node].memory_bytes += bytes;  // (no per-device figures)
      }
    }
    for (const auto& [device, bytes] : j.predicted_device_memory_bytes()) {
      NodeLoad& load = out[device.substr(0, device.find('/'))];
      load.device_memory_bytes[device] += bytes;
    }
  }
  return out;
}

std::vector<std::string> ShareBusyNodes(const std::map<std::string, NodeLoad>& loads,
                                        const std::set<std::string>& measured_loaded,
                                        quilt::v1::ClusterSpec* cluster) {
  std::vector<std::string> lines;
  for (auto& node : *cluster->mutable_nodes()) {
    auto it = loads.find(node.node_id());
    if (it == loads.end() || it->second.jobs == 0 || node.devices_size() == 0) continue;
    const NodeLoad& load = it->second;
    const bool measured = measured_loaded.count(node.node_id()) > 0;
    const int64_t evenly = load.memory_bytes / node.devices_size();
    int64_t held_total = load.memory_bytes;
    for (auto& d : *node.mutable_devices()) {
      if (!measured) Slower(load.jobs + 1.0, &d);
      auto on_device = load.device_memory_bytes.find(d.id());
      const int64_t held =
          evenly + (on_device == load.device_memory_bytes.end() ? 0 : on_device->second);
      if (on_device != load.device_memory_bytes.end()) held_total += on_device->second;
      d.set_memory_bytes(std::max<int64_t>(0, d.memory_bytes() - held));
    }
    lines.push_back(absl::StrCat(
        node.node_id(), ": shared with ", load.jobs, " running job(s): ",
        measured ? "their load is in its profile"
                 : absl::StrCat("planned at 1/", load.jobs + 1, " of its devices' speed"),
        ", less the ", absl::StrFormat("%.1f", held_total / 1048576.0), " MiB their plans hold"));
  }
  return lines;
}

absl::StatusOr<PlanResult> PlanHolding(absl::Mutex* lock, const Graph& graph, const Topology& topo,
                                       const PlanOptions& options) {
  absl::MutexLockMaybe held(lock);
  return Plan(graph, topo, options);
}

absl::Status CheckCheckpointDir(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();  // the coordinator's own
  if (dir[0] != '/') {
    return absl::InvalidArgumentError("the checkpoint directory '" + dir +
                                      "' must be an absolute path");
  }
  // Writable (a read-only mount would fail the job at its first checkpoint).
  if (absl::Status w = MakeWritableDir(dir); !w.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint directory ", dir,
                                                   w.code() == absl::StatusCode::kFailedPrecondition
                                                       ? " cannot be created here: "
                                                       : " cannot be written here: ",
                                                   w.message()));
  }
  return absl::OkStatus();
}

// A resumed job's starting checkpoint: every rank's index there (the
// executors read it at their start).
absl::Status CheckResumeFrom(const quilt::v1::JobSpec& spec) {
  if (!spec.has_resume_from()) return absl::OkStatus();
  const quilt::v1::ResumeFrom& from = spec.resume_from();
  if (from.steps_before() < 0) {
    return absl::InvalidArgumentError("resume_from.steps_before must not be negative");
  }
  if (from.checkpoint().empty()) return absl::OkStatus();
  if (!spec.initial_weights().empty()) {
    // (The checkpoint's values would replace them without a word.)
    return absl::InvalidArgumentError(
        "a job resumes from a checkpoint (resume_from.checkpoint) or starts from initial "
        "weights (initial_weights), not both");
  }
  if (from.checkpoint()[0] != '/') {
    return absl::InvalidArgumentError("resume_from.checkpoint '" + from.checkpoint() +
                                      "' must be an absolute path");
  }
  if (from.world() < 1 || from.world() > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume_from.world must be 1 to 65536, not ", from.world()));
  }
  if (const int r = MissingRank(from.checkpoint(), from.world()); r >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint to resume from is incomplete or unreadable here: no ",
                     from.checkpoint(), "/rank-", r, "/metrics.json"));
  }
  return absl::OkStatus();
}

absl::StatusOr<quilt::v1::ClusterSpec> ProfiledCluster(
    const Graph& graph, int64_t global_batch, const NodeRegistry& registry, const LinkProbes* links,
    ModelProfiles* profiles, absl::Duration timeout, std::vector<std::string>* calibration,
    const std::function<bool()>& abandoned, std::set<std::string>* measured_loaded) {
  ASSIGN_OR_RETURN(quilt::v1::ClusterSpec cluster, LiveClusterSpec(registry, links));
  *calibration =
      profiles->Calibrate(graph, global_batch, timeout, &cluster, abandoned, measured_loaded);
  // The nodes Ready now (one may have gone while profiling), as profiled.
  ASSIGN_OR_RETURN(quilt::v1::ClusterSpec now, LiveClusterSpec(registry, links));
  for (auto& node : *now.mutable_nodes()) {
    for (const auto& profiled : cluster.nodes()) {
      if (profiled.node_id() == node.node_id()) *node.mutable_devices() = profiled.devices();
    }
  }
  return now;
}

absl::StatusOr<NewJob> PrepareJob(const quilt::v1::JobSpec& spec, const NodeRegistry& registry,
                                  const LinkProbes* links, ModelProfiles* profiles,
                                  const SubmissionOptions& options) {
  if (spec.steps() < 1) return absl::InvalidArgumentError("steps must be at least 1");
  // The name is shown in tables and logs: printable and short.
  RETURN_IF_ERROR(CheckDisplayText(spec.name(), kMaxJobNameBytes, "the job's name"));
  if (spec.checkpoint_interval_steps() < 0) {
    return absl::InvalidArgumentError("checkpoint_interval_steps must not be negative");
  }
  if (spec.keep_checkpoints() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep_checkpoints must not be negative (0 keeps every one), not ",
                     spec.keep_checkpoints()));
  }
  if (spec.max_restarts() < 0 || spec.max_restarts() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_restarts must be 0 to 100, not ", spec.max_restarts()));
  }
  if (spec.priority() < -1000 || spec.priority() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority must be -1000 to 1000, not ", spec.priority()));
  }
  if (spec.priority() != 0 && !spec.queue()) {
    return absl::InvalidArgumentError(
        "a priority orders the queue: it needs queue (a job without it never waits)");
  }
  if (spec.max_restarts() > 0 && spec.checkpoint_interval_steps() == 0) {
    return absl::InvalidArgumentError(
        "max_restarts needs checkpoints before the end (--checkpoint-every N): a restart "
        "trains on from the last one");
  }
  ASSIGN_OR_RETURN(Graph graph, TrainingGraphForJob(spec));
  RETURN_IF_ERROR(CheckDataset(spec, graph));
  RETURN_IF_ERROR(CheckCheckpointDir(spec.checkpoint_dir()));
  RETURN_IF_ERROR(CheckResumeFrom(spec));
  ASSIGN_OR_RETURN(quilt::v1::ClusterSpec cluster, LiveClusterSpec(registry, links));
  const std::string strategy = spec.strategy().empty() ? "auto" : spec.strategy();
  auto loads_now = [&] {
    return options.loads ? options.loads() : std::map<std::string, NodeLoad>{};
  };
  const bool profiling = profiles != nullptr && options.profile_timeout > absl::ZeroDuration();
  std::vector<std::string> calibration;
  std::set<std::string> measured_loaded;
  if (profiling) {
    // Planned with the devices' start-up figures first: a job that fits no
    // plan is refused before any worker profiles it.
    // (Whether any plan fits: the search runs only when no baseline does.)
    absl::StatusOr<PlanResult> first = PlanOn(spec, graph, cluster, strategy, options, loads_now(),
                                              {}, options.planner_lock, nullptr, true);
    if (!first.ok()) return WithNotReadyNodes(first.status(), registry);
    ASSIGN_OR_RETURN(cluster, ProfiledCluster(graph, spec.global_batch(), registry, links, profiles,
                                              options.profile_timeout, &calibration,
                                              options.abandoned, &measured_loaded));
    if (options.abandoned != nullptr && options.abandoned()) {
      QLOG_INFO(
          "a submission was abandoned by its client while the workers profiled the model; "
          "no job was started");
      return absl::CancelledError("the client gave up waiting; the job was not started");
    }
  }
  // The final plan, with the jobs on the nodes now, until the job is placed.
  absl::MutexLockMaybe placing(options.planner_lock);
  const std::map<std::string, NodeLoad> loads = loads_now();
  std::vector<std::string> shared;  // the busy nodes' lines
  absl::StatusOr<PlanResult> planned =
      PlanOn(spec, graph, cluster, strategy, options, loads, measured_loaded, nullptr, &shared);
  if (!planned.ok()) return WithNotReadyNodes(planned.status(), registry);
  const PlanResult& result = *planned;
  NewJob job;
  job.spec = spec;
  job.spec.set_strategy(strategy);
  job.program = result.best_program.SerializeAsString();
  // The nodes the program runs on (an idle node is no part of the job).
  std::set<std::string> used;
  for (const auto& d : result.best_program.devices()) {
    used.insert(d.device().substr(0, d.device().find('/')));
  }
  for (const auto& node : cluster.nodes()) {
    if (used.count(node.node_id())) job.world.push_back(node.node_id());
  }
  job.strategy = result.report.best();
  job.micro_batches = static_cast<int>(result.best_program.micro_batches());
  job.micro_batches_in_flight = result.best_program.strategy().micro_batches_in_flight();
  job.calibration = std::move(calibration);
  for (std::string& line : shared) {
    if (used.count(line.substr(0, line.find(':')))) job.calibration.push_back(std::move(line));
  }
  for (const auto& e : result.report.estimates()) {
    if (e.name() != result.report.best()) continue;
    job.predicted_step_time_s = e.step_time_s();
    for (const quilt::v1::DeviceMemory& m : e.memory()) {
      const std::string node = m.device().substr(0, m.device().find('/'));
      if (!used.count(node)) continue;
      job.predicted_memory_bytes[node] += m.peak_bytes();
      job.predicted_device_memory_bytes[m.device()] += m.peak_bytes();
    }
  }
  QLOG_INFO("planned {} on {} node(s): {} predicted {:.4f} s/step", JobLabel(spec),
            job.world.size(), job.strategy, job.predicted_step_time_s);
  if (options.place) {
    RETURN_IF_ERROR(options.place(std::move(job)));
    return NewJob{};
  }
  return job;
}

}  // namespace quilt
