// Network address helpers: parsing "host:port" / "[v6]:port" and telling
// loopback addresses apart (plaintext is only allowed on loopback).
#ifndef QUILT_SRC_COMMON_NET_H_
#define QUILT_SRC_COMMON_NET_H_

#include <string>

#include "absl/status/statusor.h"

namespace quilt {

struct HostPort {
  std::string host;
  int port = 0;
};

// Errors: INVALID_ARGUMENT naming the address.
absl::StatusOr<HostPort> ParseHostPort(const std::string& address);

// True for localhost, 127.0.0.0/8, ::1 and unix: addresses.
bool IsLoopbackAddress(const std::string& address);

// This machine's hostname.
std::string LocalHostname();

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_NET_H_
