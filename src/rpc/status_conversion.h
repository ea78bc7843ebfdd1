// The one place where absl::Status and grpc::Status are converted. Codes map
// one to one (both follow google.rpc.Code); messages are kept.
#ifndef QUILT_SRC_RPC_STATUS_CONVERSION_H_
#define QUILT_SRC_RPC_STATUS_CONVERSION_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace quilt::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_STATUS_CONVERSION_H_
