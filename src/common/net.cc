#include "src/common/net.h"

#include <arpa/inet.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace quilt {

absl::StatusOr<HostPort> ParseHostPort(const std::string& address) {
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address '", address, "': ", why, " (expected host:port)"));
  };
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (hp.host.empty()) return bad("empty host");
  if (!absl::SimpleAtoi(address.substr(colon + 1), &hp.port) || hp.port < 0 || hp.port > 65535) {
    return bad("port must be 0-65535");
  }
  return hp;
}

bool IsLoopbackAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return true;
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return false;
  if (hp->host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, hp->host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, hp->host.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

std::string LocalHostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace quilt
