// Measuring the links between nodes. Every worker serves a probe endpoint
// (TCP; its NodeInfo.address) that sinks bulk transfers and echoes single
// bytes; when the coordinator asks (a LinkProbe with a heartbeat), the
// worker runs the probe against the peer's endpoint on its own thread —
// `bytes` streamed and acknowledged (bandwidth) and 20 one-byte round
// trips (latency, half the median) — and the result goes back with the
// next heartbeat.
//
// Thread-safe.
#ifndef QUILT_SRC_WORKER_LINK_PROBE_H_
#define QUILT_SRC_WORKER_LINK_PROBE_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/services.pb.h"

namespace quilt {

struct LinkMeasurement {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
};

// Connects to a probe endpoint and measures. Errors: UNAVAILABLE naming the
// address, DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<LinkMeasurement> MeasureLink(const std::string& address, int64_t bytes,
                                            absl::Duration timeout);

class ProbeServer {
 public:
  // Listens on `address` (host:port; port 0 = any).
  static absl::StatusOr<std::unique_ptr<ProbeServer>> Start(const std::string& address);
  ~ProbeServer();
  // host:port it listens on.
  const std::string& address() const { return address_; }

 private:
  ProbeServer() = default;
  void Serve();

  int fd_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Runs the probes the coordinator asks for, one at a time, and keeps their
// results until acknowledged.
class ProbeRunner {
 public:
  explicit ProbeRunner(std::function<void()> on_result) : on_result_(std::move(on_result)) {}
  ~ProbeRunner();
  void Start(const quilt::v1::LinkProbe& probe);
  std::vector<quilt::v1::LinkProbeResult> Results() const;
  void Ack(const std::vector<quilt::v1::LinkProbeResult>& sent);

 private:
  std::function<void()> on_result_;
  mutable absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<quilt::v1::LinkProbeResult> results_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_LINK_PROBE_H_
