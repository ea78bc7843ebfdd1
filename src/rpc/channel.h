// Client channels to Quilt daemons, with the message size limits and
// keepalive settings every client uses.
#ifndef QUILT_SRC_RPC_CHANNEL_H_
#define QUILT_SRC_RPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/time/time.h"

namespace quilt::rpc {

// Over TLS with the process's client token when SetClientSecurity gave a
// CA (security.h), else plaintext.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Sets the deadline of `ctx` to now + timeout.
void SetTimeout(grpc::ClientContext* ctx, absl::Duration timeout);

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_CHANNEL_H_
