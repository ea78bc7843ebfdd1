// Job logs fetched from the workers (GetJobLogs, `quiltctl logs`): a
// request for a job's executor log on some nodes goes to each node's
// worker with its next heartbeat response, and the worker answers with the
// log's last lines in its following heartbeat (which it sends at once).
// Fetch waits for the answers up to a timeout; a node that is not Ready is
// not asked, and one that does not answer in time gets an error saying so.
// A worker answers only the requests handed to its own node. A request not
// answered `rehand_after` after it was handed is handed again (its
// response, or the worker's reply, may have been lost; a second answer is
// dropped); a stopping worker's last heartbeat is handed none.
//
// Thread-safe.
#ifndef QUILT_SRC_COORDINATOR_JOB_LOGS_H_
#define QUILT_SRC_COORDINATOR_JOB_LOGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/services.pb.h"

namespace quilt {

class JobLogs {
 public:
  // `ready(node)`: whether the node is Ready (others are not asked); null:
  // always.
  explicit JobLogs(std::function<bool(const std::string&)> ready = nullptr,
                   absl::Duration rehand_after = absl::Seconds(2))
      : ready_(std::move(ready)), rehand_after_(rehand_after) {}

  // Takes the node's answers and hands it the requests asked of it.
  void OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                   quilt::v1::HeartbeatResponse* response);

  // The last `lines` lines of job `job_id`'s executor log on each of
  // `nodes` (in their order), or for a node in `offsets` what it wrote from
  // that offset on; waiting at most `timeout` for the answers; a node not
  // Ready, or silent, has its `error` set. `run` (not with `offsets`): the
  // last lines of that run only (LogRequest.run).
  std::vector<quilt::v1::LogReply> Fetch(const std::string& job_id,
                                         const std::vector<std::string>& nodes, int lines,
                                         absl::Duration timeout,
                                         const std::map<std::string, int64_t>& offsets = {},
                                         int run = 0);

  // Ends every wait now, and every later one at once (the coordinator is
  // stopping).
  void Shutdown();

 private:
  struct Pending {
    std::string node;
    quilt::v1::LogRequest request;
    absl::Time handed = absl::InfinitePast();
    bool answered = false;
    quilt::v1::LogReply reply;
  };

  const std::function<bool(const std::string&)> ready_;
  const absl::Duration rehand_after_;
  absl::Mutex mu_;
  std::map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);  // by request id
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_JOB_LOGS_H_
