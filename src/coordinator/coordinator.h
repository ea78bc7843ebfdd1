// The coordinator's domain core: owns the state store, the node registry, the
// jobs, the measured links, the models' profiles, the job-log requests and
// the liveness ticker. The gRPC services (src/rpc/) call into the
// components it exposes; main.cc wires the two together.
//
// Threading: Start() launches one ticker thread that checks liveness every
// quarter heartbeat period; Stop() joins it. Components are thread-safe.
// BeginDrain() (a stopping coordinator, which serves no more heartbeats)
// stops judging the nodes: their silence is the coordinator's, and a job
// must outlive the restart.
#ifndef QUILT_SRC_COORDINATOR_COORDINATOR_H_
#define QUILT_SRC_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/common/clock.h"
#include "src/common/dir_lock.h"
#include "src/coordinator/config.h"
#include "src/coordinator/job_logs.h"
#include "src/coordinator/job_manager.h"
#include "src/coordinator/link_probes.h"
#include "src/coordinator/model_profiles.h"
#include "src/coordinator/node_registry.h"
#include "src/coordinator/store/store.h"

namespace quilt {

class Coordinator {
 public:
  // Opens <state_dir>/coordinator.db (creating the directory) and loads the
  // registry. Errors: UNAVAILABLE / DATA_LOSS / FAILED_PRECONDITION from the
  // store, with the path named.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(const CoordinatorConfig& config,
                                                             Clock* clock);
  ~Coordinator();

  void Start();
  // From now on no node is taken NotReady or Down, and no job fails for a
  // silent node (the coordinator is stopping).
  void BeginDrain() { draining_.store(true); }
  void Stop();

  NodeRegistry* registry() { return registry_.get(); }
  JobManager* jobs() { return jobs_.get(); }
  LinkProbes* links() { return links_.get(); }
  ModelProfiles* profiles() { return profiles_.get(); }
  JobLogs* logs() { return logs_.get(); }
  const CoordinatorConfig& config() const { return config_; }
  absl::Time start_time() const { return start_time_; }
  Clock* clock() const { return clock_; }

 private:
  Coordinator(const CoordinatorConfig& config, Clock* clock) : config_(config), clock_(clock) {}
  void TickerLoop();

  CoordinatorConfig config_;
  Clock* clock_;
  std::unique_ptr<DirLock> lock_;  // of the state dir; released last
  absl::Time start_time_;
  std::unique_ptr<CoordinatorStore> store_;
  std::unique_ptr<NodeRegistry> registry_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<LinkProbes> links_;
  std::unique_ptr<ModelProfiles> profiles_;
  std::unique_ptr<JobLogs> logs_;
  absl::Notification stop_;
  std::atomic<bool> draining_{false};
  std::thread ticker_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_COORDINATOR_H_
