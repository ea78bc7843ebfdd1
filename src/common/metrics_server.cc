#include "src/common/metrics_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/common/net.h"

namespace quilt {
namespace {

constexpr size_t kMaxRequestBytes = 8 << 10;
// Everything one connection may take: reading the request, sending the
// answer and reading what the client sends after it.
constexpr int kConnectionDeadlineMs = 2000;

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFor(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    const int64_t left = deadline_ms - NowMs();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(left));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

void SendAll(int fd, const std::string& data, int64_t deadline_ms) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (!WaitFor(fd, POLLOUT, deadline_ms)) return;  // a client that does not read
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client left
    sent += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& body, bool head) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason,
                      "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                      "Content-Length: ",
                      body.size(), "\r\nConnection: close\r\n\r\n", head ? "" : body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, const std::string& path, std::function<std::string()> render) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  // IPv4 unless the host is an IPv6 literal ("localhost" is 127.0.0.1,
  // where scrapers look).
  const bool v6 = absl::StrContains(hp->host, ':');
  hints.ai_family = v6 ? AF_INET6 : AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(hp->port);
  if (int rc =
          getaddrinfo(hp->host.empty() ? nullptr : hp->host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address to listen on";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0) {
      error = strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int got =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const std::string host = v6 ? "[" + hp->host + "]" : hp->host;
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(fd, absl::StrCat(host, ":", got), path, std::move(render)));
}

MetricsServer::MetricsServer(int fd, std::string address, std::string path,
                             std::function<std::string()> render)
    : fd_(fd), address_(std::move(address)), path_(std::move(path)), render_(std::move(render)) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  thread_.join();
  close(fd_);
}

void MetricsServer::Loop() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;  // (checks stop_ every 100 ms)
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      // Out of descriptors (the listener stays readable): not a busy loop.
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
        poll(nullptr, 0, 100);
      }
      continue;
    }
    const int64_t deadline = NowMs() + kConnectionDeadlineMs;
    Serve(client, deadline);
    // The answer is sent: end our side, and read what the client still
    // sends until it closes (closing with unread bytes would reset the
    // connection, and the client could lose the answer).
    shutdown(client, SHUT_WR);
    char sink[4096];
    for (size_t drained = 0; drained < (64 << 10) && WaitFor(client, POLLIN, deadline);) {
      const ssize_t n = recv(client, sink, sizeof(sink), MSG_DONTWAIT);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
    close(client);
  }
}

void MetricsServer::Serve(int client, int64_t deadline_ms) {
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes &&
         WaitFor(client, POLLIN, deadline_ms)) {
    const ssize_t n = recv(client, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;  // closed
    request.append(buf, static_cast<size_t>(n));
  }
  const size_t eol = request.find("\r\n");
  std::vector<std::string> line = absl::StrSplit(request.substr(0, eol), ' ', absl::SkipEmpty());
  if (eol == std::string::npos || line.size() != 3 || !absl::StartsWith(line[2], "HTTP/1.")) {
    SendAll(client, Response(400, "Bad Request", "not an HTTP/1 request\n", false), deadline_ms);
    return;
  }
  const bool head = line[0] == "HEAD";
  if (line[0] != "GET" && !head) {
    SendAll(client, Response(405, "Method Not Allowed", "only GET\n", false), deadline_ms);
    return;
  }
  const std::string target = line[1].substr(0, line[1].find('?'));
  if (target != path_) {
    SendAll(client, Response(404, "Not Found", "metrics are at " + path_ + "\n", head),
            deadline_ms);
    return;
  }
  SendAll(client, Response(200, "OK", render_(), head), deadline_ms);
}

}  // namespace quilt
