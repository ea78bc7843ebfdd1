// Turning a JobSpec into a runnable job: the checks a submission must pass
// before any worker is involved (model, loss and optimizer, steps, batch,
// dataset files and their shapes, Ready nodes, memory), then the plan on
// the live cluster (the planner for "auto", or the named baseline) and the
// lowered program. Every rejection names the problem.
#ifndef QUILT_SRC_COORDINATOR_JOB_SUBMISSION_H_
#define QUILT_SRC_COORDINATOR_JOB_SUBMISSION_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/quilt/v1/job.pb.h"
#include "src/coordinator/job_manager.h"
#include "src/coordinator/link_probes.h"
#include "src/coordinator/model_profiles.h"
#include "src/coordinator/node_registry.h"
#include "src/graph/graph.h"
#include "src/planner/plan.h"

namespace quilt {

// What the jobs not ended hold of a node.
struct NodeLoad {
  int jobs = 0;
  // Their plans' peak memory on the node, summed (predicted).
  int64_t memory_bytes = 0;
  // The same per device, where the jobs say (jobs from before per-device
  // figures were kept count in memory_bytes only).
  std::map<std::string, int64_t> device_memory_bytes;
};

// Per node, from the statuses of the jobs (those not ended count).
std::map<std::string, NodeLoad> NodeLoads(const std::vector<quilt::v1::JobStatus>& jobs);

// The cluster as a new job would share it: a node running k jobs has its
// devices compute at 1/(k+1) of their speed (time-shared; not for a node
// in `measured_loaded`, whose figures were measured while its jobs ran),
// and its devices hold what those jobs' plans leave of their memory (per
// device; what a job gave per node only is split evenly over the node's
// devices). A line per busy node for the job's calibration notes.
std::vector<std::string> ShareBusyNodes(const std::map<std::string, NodeLoad>& loads,
                                        const std::set<std::string>& measured_loaded,
                                        quilt::v1::ClusterSpec* cluster);

struct SubmissionOptions {
  // The jobs on the nodes now (NodeLoads; null: none): the plan shares
  // their devices (ShareBusyNodes). Read for the final plan with
  // `planner_lock` held until `place` has taken the job.
  std::function<std::map<std::string, NodeLoad>()> loads;
  // Takes the prepared job (adds it to the jobs) with `planner_lock` held,
  // so that the next submission's plan counts it (null: PrepareJob returns
  // the job instead).
  std::function<absl::Status(NewJob&&)> place;
  // The planner's time budget for "auto" (plan_budget.h).
  double time_budget_s = 10;
  // How long to wait for the workers' profiles of the model (0: none).
  absl::Duration profile_timeout = absl::ZeroDuration();
  // Held while the planner runs (null: none), so that concurrent
  // submissions, which may wait for profiles, plan one at a time.
  absl::Mutex* planner_lock = nullptr;
  // Whether the client has left (null: never): profiling stops waiting and
  // the job is not planned further.
  std::function<bool()> abandoned;
  // Once a plan has taken this long, its progress lines ("simulating
  // dp-even-ps", "still simulating …") go to the log: on hundreds of devices
  // planning takes tens of seconds.
  absl::Duration log_progress_after = absl::Seconds(5);
};

// quilt::Plan while holding `lock` (null: none), so that requests planning
// at once run the CPU-bound planner one at a time.
absl::StatusOr<PlanResult> PlanHolding(absl::Mutex* lock, const Graph& graph, const Topology& topo,
                                       const PlanOptions& options);

// Errors: INVALID_ARGUMENT (bad model, unsupported op, steps < 1, batch
// smaller than the devices it is split over, unreadable or mismatched
// dataset, unknown strategy), FAILED_PRECONDITION (no Ready nodes, no
// strategy fits the devices' memory).
// A job's checkpoint directory: empty (the coordinator's), or an absolute
// path the coordinator can create (it and the nodes share the storage).
// Errors: INVALID_ARGUMENT naming the path.
absl::Status CheckCheckpointDir(const std::string& dir);

// The live cluster with each node's devices as the workers' profiles of
// `graph` (at `global_batch`) calibrate them, waiting at most `timeout`;
// the nodes are those Ready once the profiles are in. `calibration`: per
// node, what its devices are (JobStatus.calibration). Errors: those of
// LiveClusterSpec.
absl::StatusOr<quilt::v1::ClusterSpec> ProfiledCluster(
    const Graph& graph, int64_t global_batch, const NodeRegistry& registry, const LinkProbes* links,
    ModelProfiles* profiles, absl::Duration timeout, std::vector<std::string>* calibration,
    const std::function<bool()>& abandoned = nullptr,
    std::set<std::string>* measured_loaded = nullptr);

// The longest job name (bytes of UTF-8).
inline constexpr size_t kMaxJobNameBytes = 128;

// With `profiles`, the workers profile the model first and the plan uses
// their calibrations (model_profiles.h). With `options.place`, the job is
// handed to it (and the one returned is empty).
absl::StatusOr<NewJob> PrepareJob(const quilt::v1::JobSpec& spec, const NodeRegistry& registry,
                                  const LinkProbes* links, ModelProfiles* profiles,
                                  const SubmissionOptions& options);

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_JOB_SUBMISSION_H_
