#include "src/worker/link_probe.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/common/net.h"
#include "src/common/status.h"

namespace quilt {
namespace {

constexpr size_t kChunk = size_t{1} << 20;
constexpr int kRoundTrips = 20;

// Full reads and writes with an overall deadline.
bool Io(int fd, char* p, size_t n, bool write_side, absl::Time deadline) {
  while (n > 0) {
    const int ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd pfd = {fd, static_cast<short>(write_side ? POLLOUT : POLLIN), 0};
    if (ms == 0 || poll(&pfd, 1, ms) <= 0) return false;
    const ssize_t r =
        write_side ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void Handle(int fd) {
  // Requests: 'B' + 8-byte count (bulk, acknowledged with one byte) or
  // 'P' (one byte echoed).
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  std::vector<char> buf(kChunk);
  char op = 0;
  while (Io(fd, &op, 1, false, deadline)) {
    if (op == 'P') {
      if (!Io(fd, &op, 1, true, deadline)) break;
    } else if (op == 'B') {
      int64_t n = 0;
      if (!Io(fd, reinterpret_cast<char*>(&n), sizeof(n), false, deadline)) break;
      bool ok = true;
      while (ok && n > 0) {
        const size_t part = static_cast<size_t>(std::min<int64_t>(n, kChunk));
        ok = Io(fd, buf.data(), part, false, deadline);
        n -= static_cast<int64_t>(part);
      }
      const char ack = 'A';
      if (!ok || !Io(fd, const_cast<char*>(&ack), 1, true, deadline)) break;
    } else {
      break;
    }
  }
  close(fd);
}

}  // namespace

absl::StatusOr<LinkMeasurement> MeasureLink(const std::string& address, int64_t bytes,
                                            absl::Duration timeout) {
  ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(address));
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return absl::UnavailableError("cannot resolve the probe endpoint " + address);
  }
  // Non-blocking from the start, so that connecting obeys the deadline too.
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  bool connected = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  if (!connected && fd >= 0 && errno == EINPROGRESS) {
    pollfd pfd = {fd, POLLOUT, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
    int err = 0;
    socklen_t len = sizeof(err);
    connected =
        poll(&pfd, 1, ms) > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    if (!connected) errno = err != 0 ? err : ETIMEDOUT;
  }
  freeaddrinfo(res);
  if (!connected) {
    const std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the probe endpoint ", address, ": ", why));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  LinkMeasurement m;
  std::vector<double> rtts;
  bool ok = true;
  for (int i = 0; ok && i < kRoundTrips; ++i) {
    char b = 'P';
    const absl::Time s = absl::Now();
    ok = Io(fd, &b, 1, true, deadline) && Io(fd, &b, 1, false, deadline);
    rtts.push_back(absl::ToDoubleSeconds(absl::Now() - s));
  }
  if (ok) {
    std::vector<char> buf(kChunk, 'x');
    char head[1 + sizeof(int64_t)] = {'B'};
    std::memcpy(head + 1, &bytes, sizeof(bytes));
    const absl::Time s = absl::Now();
    ok = Io(fd, head, sizeof(head), true, deadline);
    for (int64_t left = bytes; ok && left > 0; left -= static_cast<int64_t>(kChunk)) {
      ok = Io(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(left, kChunk)), true, deadline);
    }
    char ack = 0;
    ok = ok && Io(fd, &ack, 1, false, deadline);
    const double t = absl::ToDoubleSeconds(absl::Now() - s);
    if (ok && t > 0) m.bandwidth_bytes_per_s = static_cast<double>(bytes) / t;
  }
  close(fd);
  if (!ok) {
    return absl::Now() >= deadline
               ? absl::DeadlineExceededError("probing " + address + " took longer than " +
                                             absl::FormatDuration(timeout))
               : absl::UnavailableError("the probe endpoint " + address + " broke off");
  }
  std::sort(rtts.begin(), rtts.end());
  m.latency_s = rtts[rtts.size() / 2] / 2;
  return m;
}

absl::StatusOr<std::unique_ptr<ProbeServer>> ProbeServer::Start(const std::string& address) {
  ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(address));
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return absl::InvalidArgumentError("cannot resolve the probe address " + address);
  }
  std::unique_ptr<ProbeServer> s(new ProbeServer());
  s->fd_ = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s->fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound =
      s->fd_ >= 0 && bind(s->fd_, res->ai_addr, res->ai_addrlen) == 0 && listen(s->fd_, 8) == 0;
  freeaddrinfo(res);
  if (!bound) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for link probes on ", address, ": ", strerror(errno)));
  }
  sockaddr_storage a = {};
  socklen_t len = sizeof(a);
  getsockname(s->fd_, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  s->address_ = hp.host.find(':') != std::string::npos ? absl::StrCat("[", hp.host, "]:", port)
                                                       : absl::StrCat(hp.host, ":", port);
  s->thread_ = std::thread([p = s.get()] { p->Serve(); });
  return s;
}

ProbeServer::~ProbeServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
}

void ProbeServer::Serve() {
  // One probe at a time: a measurement shares the link with nothing else
  // this server does.
  while (!stop_) {
    pollfd pfd = {fd_, POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) continue;
    const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c >= 0) Handle(c);
  }
}

ProbeRunner::~ProbeRunner() {
  if (thread_.joinable()) thread_.join();
}

void ProbeRunner::Start(const quilt::v1::LinkProbe& probe) {
  {
    absl::MutexLock lock(&mu_);
    if (busy_) return;  // the coordinator asks again later
    busy_ = true;
  }
  if (thread_.joinable()) thread_.join();
  thread_ = std::thread([this, probe] {
    absl::StatusOr<LinkMeasurement> m =
        MeasureLink(probe.peer_address(), probe.bytes(), absl::Seconds(30));
    quilt::v1::LinkProbeResult r;
    r.set_probe_id(probe.probe_id());
    r.set_peer_node(probe.peer_node());
    if (m.ok()) {
      r.set_bandwidth_bytes_per_s(m->bandwidth_bytes_per_s);
      r.set_latency_s(m->latency_s);
      QLOG_INFO("link to {} measured: {:.3g} GB/s, {:.3g} ms", probe.peer_node(),
                m->bandwidth_bytes_per_s / 1e9, m->latency_s * 1e3);
    } else {
      r.set_error(std::string(m.status().message()));
      QLOG_WARN("link probe to {} failed: {}", probe.peer_node(), m.status().ToString());
    }
    {
      absl::MutexLock lock(&mu_);
      results_.push_back(std::move(r));
      busy_ = false;
    }
    if (on_result_) on_result_();
  });
}

std::vector<quilt::v1::LinkProbeResult> ProbeRunner::Results() const {
  absl::MutexLock lock(&mu_);
  return results_;
}

void ProbeRunner::Ack(const std::vector<quilt::v1::LinkProbeResult>& sent) {
  absl::MutexLock lock(&mu_);
  for (const auto& s : sent) {
    results_.erase(std::remove_if(results_.begin(), results_.end(),
                                  [&](const quilt::v1::LinkProbeResult& r) {
                                    return r.probe_id() == s.probe_id();
                                  }),
                   results_.end());
  }
}

}  // namespace quilt
