// Profiles of submitted models, asked of the workers with their heartbeats
// before a job is planned (as HeteroG profiles each op on each device
// type): every node's first CPU device runs the model's one-device program
// at the rows a device of the cluster will compute (the global batch over
// its devices; fewer when a step of those would be long: max_step_s) and
// at half of them (its float32 weights sent as seeded uniform initializers
// over their ranges, not their values: a step takes as long), and the
// executor's measured times give
// the node a calibration (calibration.h) that replaces its devices'
// start-up figures for this job. A node that does not answer in time, or
// whose profile fails, is planned with its start-up figures, and the job
// says so. Results are kept per model, node and rows (until the node's
// worker restarts), so a model submitted again is planned at once.
//
// Thread-safe.
#ifndef QUILT_SRC_COORDINATOR_MODEL_PROFILES_H_
#define QUILT_SRC_COORDINATOR_MODEL_PROFILES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "proto/quilt/v1/services.pb.h"
#include "src/graph/graph.h"

namespace quilt {

struct ProfileOptions {
  // Seconds of measured steps each run aims for (at least min_steps; at
  // most max_steps: steps of a millisecond or less need a couple of hundred
  // for a median that noise does not swing).
  double run_s = 0.5;
  int64_t min_steps = 4, max_steps = 200;
  int64_t warmup_steps = 2;
  // Rows a profile runs at most: those a step of about this long computes
  // (predicted from the device's start-up figures). A device's rows beyond
  // them (a huge batch) are priced by the calibration fitted below them,
  // instead of profiling for minutes (and gigabytes) what a plan may not
  // wait for.
  double max_step_s = 1.0;
};

class ModelProfiles {
 public:
  // `ready(node)`: whether the node is still Ready (a node that is not is
  // no longer waited for); null = always.
  explicit ModelProfiles(ProfileOptions options = {},
                         std::function<bool(const std::string&)> ready = nullptr)
      : options_(options), ready_(std::move(ready)) {}

  // Ends every wait now (those plans use the start-up figures) and every
  // later one at once: the coordinator is stopping.
  void Shutdown();

  // Takes the node's results and hands it the profiles asked of it.
  void OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                   quilt::v1::HeartbeatResponse* response);

  // Profiles `training_graph` on every node of `cluster` (waiting at most
  // `timeout` for the results) and calibrates their CPU devices in
  // `cluster`; one line per node saying what its devices were planned
  // with.
  // `abandoned` (null: never) ends the wait early: the plan's client left.
  // `loaded` (optional) gets the nodes calibrated by a profile taken while
  // jobs ran there (their figures already share the node).
  std::vector<std::string> Calibrate(const Graph& training_graph, int64_t global_batch,
                                     absl::Duration timeout, quilt::v1::ClusterSpec* cluster,
                                     const std::function<bool()>& abandoned = nullptr,
                                     std::set<std::string>* loaded = nullptr);

 private:
  struct Node {
    uint64_t incarnation = 0;
    std::deque<quilt::v1::ModelProfile> pending;  // not handed out yet
  };

  const ProfileOptions options_;
  const std::function<bool(const std::string&)> ready_;
  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  // By profile id ("<model>-<node>-<rows>"): the node and its result.
  std::map<std::string, std::pair<std::string, quilt::v1::ModelProfileResult>> results_
      ABSL_GUARDED_BY(mu_);
  // Profile ids asked and not answered.
  std::map<std::string, std::string> asked_ ABSL_GUARDED_BY(mu_);  // id → node
  // Plans waiting for each profile id.
  std::map<std::string, int> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_MODEL_PROFILES_H_
