// A minimal HTTP/1.x server for one read-only text page: what Prometheus
// scrapes. GET (or HEAD) of `path` answers 200 with the page `render`
// makes at that moment; another path 404, another method 405, a request
// that is not HTTP 400. One connection at a time, each closed after its
// answer and given 2 s in all (reading, answering), so a stuck or slow
// scraper cannot hold the next one up for longer. IPv4 unless the host is
// an IPv6 literal. Plaintext and
// unauthenticated: the page must hold nothing secret.
#ifndef QUILT_SRC_COMMON_METRICS_SERVER_H_
#define QUILT_SRC_COMMON_METRICS_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace quilt {

class MetricsServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks one). Errors:
  // INVALID_ARGUMENT (address), UNAVAILABLE (cannot listen there).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                              const std::string& path,
                                                              std::function<std::string()> render);
  ~MetricsServer();

  // The address it listens on, with the port it got.
  const std::string& address() const { return address_; }

 private:
  MetricsServer(int fd, std::string address, std::string path, std::function<std::string()> render);
  void Loop();
  void Serve(int client, int64_t deadline_ms);

  const int fd_;
  const std::string address_, path_;
  const std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_METRICS_SERVER_H_
