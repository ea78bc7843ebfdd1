// A local Quilt cluster of real processes for integration tests: a
// quilt-coordinator on 127.0.0.1 with its state in a temp dir, workers that
// register with it, and quiltctl to look at it. Short liveness timeouts
// (heartbeat 200 ms, NotReady after 1 s, Down after 2.5 s) keep tests quick.
#ifndef QUILT_TEST_INTEGRATION_CLUSTER_FIXTURE_H_
#define QUILT_TEST_INTEGRATION_CLUSTER_FIXTURE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"

namespace quilt::testing {

inline constexpr absl::Duration kHeartbeatPeriod = absl::Milliseconds(200);
inline constexpr absl::Duration kNotReadyAfter = absl::Seconds(1);
inline constexpr absl::Duration kDownAfter = absl::Milliseconds(2500);

class LocalCluster {
 public:
  LocalCluster();
  ~LocalCluster();

  // Starts the coordinator on `address` (port 0 = any), with `extra_flags`,
  // and waits until it serves. Returns its address.
  absl::StatusOr<std::string> StartCoordinator(const std::string& address = "127.0.0.1:0",
                                               const std::vector<std::string>& extra_flags = {});
  void StopCoordinator(int sig);
  std::optional<int> WaitCoordinator(absl::Duration timeout);

  // Starts a worker with one CPU device on one core and waits for its first
  // registration. Returns its incarnation (hex).
  absl::StatusOr<std::string> StartWorker(const std::string& node_id,
                                          const std::vector<std::string>& extra_flags = {},
                                          absl::Duration ready_within = absl::Seconds(30));
  void KillWorker(const std::string& node_id, int sig);

  // quiltctl against this cluster's coordinator (with the client flags
  // set, e.g. --tls-ca).
  absl::StatusOr<CommandResult> Quiltctl(const std::vector<std::string>& args);
  void SetClientFlags(std::vector<std::string> flags) { client_flags_ = std::move(flags); }
  // `quiltctl nodes -o json`, parsed; node_id → node object.
  absl::StatusOr<std::map<std::string, nlohmann::json>> Nodes();

  const std::string& address() const { return address_; }
  const TempDir& dir() const { return dir_; }
  // The log of a process ("coordinator" or a node id), for failure messages.
  std::string Log(const std::string& name) const;

 private:
  // The first line `name` writes to `ready_file`, waiting up to `timeout`;
  // the error carries its log.
  absl::StatusOr<std::string> WaitReady(const std::string& ready_file, absl::Duration timeout,
                                        const std::string& name) const;

  TempDir dir_;
  std::string address_;
  std::unique_ptr<Subprocess> coordinator_;
  std::map<std::string, std::unique_ptr<Subprocess>> workers_;
  int restarts_ = 0;
  std::vector<std::string> client_flags_;
};

// Polls `cond` every 50 ms until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& cond, absl::Duration timeout);

}  // namespace quilt::testing

#endif  // QUILT_TEST_INTEGRATION_CLUSTER_FIXTURE_H_
