#include "src/common/metrics_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
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

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
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
  hints.ai_family = AF_UNSPEC;
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
    if (fd < 0) continue;
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
  const bool v6 = absl::StrContains(hp->host, ':');
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
    if (client < 0) continue;
    Serve(client);
    // The answer is sent: end our side, and read what the client still
    // sends until it closes (closing with unread bytes would reset the
    // connection, and the client could lose the answer).
    shutdown(client, SHUT_WR);
    char sink[4096];
    for (size_t drained = 0; drained < (64 << 10);) {
      const ssize_t n = recv(client, sink, sizeof(sink), 0);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
    close(client);
  }
}

void MetricsServer::Serve(int client) {
  timeval tv{1, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const ssize_t n = recv(client, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed, or silent past the timeout
    request.append(buf, static_cast<size_t>(n));
  }
  const size_t eol = request.find("\r\n");
  std::vector<std::string> line = absl::StrSplit(request.substr(0, eol), ' ', absl::SkipEmpty());
  if (eol == std::string::npos || line.size() != 3 || !absl::StartsWith(line[2], "HTTP/1.")) {
    SendAll(client, Response(400, "Bad Request", "not an HTTP/1 request\n", false));
    return;
  }
  const bool head = line[0] == "HEAD";
  if (line[0] != "GET" && !head) {
    SendAll(client, Response(405, "Method Not Allowed", "only GET\n", false));
    return;
  }
  const std::string target = line[1].substr(0, line[1].find('?'));
  if (target != path_) {
    SendAll(client, Response(404, "Not Found", "metrics are at " + path_ + "\n", head));
    return;
  }
  SendAll(client, Response(200, "OK", render_(), head));
}

}  // namespace quilt
