// Helpers shared by the callback service implementations.
//
// Quilt's services register their methods as raw callback methods and parse
// requests themselves (HandleUnary): gRPC's own deserialization answers an
// unparseable request with UNIMPLEMENTED, while a malformed or oversized
// request is the caller's error and must get INVALID_ARGUMENT. The
// per-method byte limit is checked before parsing.
#ifndef QUILT_SRC_RPC_HANDLER_UTIL_H_
#define QUILT_SRC_RPC_HANDLER_UTIL_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/rpc/status_conversion.h"

namespace quilt::rpc {

// Finishes a unary call with `status`.
inline grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                        const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Parses a raw request. Errors: INVALID_ARGUMENT when it is larger than
// `limit` bytes or not a valid `Request`.
template <typename Request>
absl::Status ParseRequest(const grpc::ByteBuffer& raw, size_t limit, const char* method,
                          Request* request) {
  const size_t size = raw.Length();
  if (size > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, " request is ", size, " bytes; the limit is ", limit, " bytes"));
  }
  grpc::ByteBuffer copy(raw);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  if (!request->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, " request is not a valid ", Request::descriptor()->full_name()));
  }
  return absl::OkStatus();
}

// Runs one unary method on a raw request: parse (with the size limit), call
// `handler(const Request&, Response*) -> absl::Status`, serialize.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* HandleUnary(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* raw_request,
                                      grpc::ByteBuffer* raw_response, size_t limit,
                                      const char* method, Handler&& handler) {
  Request request;
  absl::Status s = ParseRequest(*raw_request, limit, method, &request);
  Response response;
  if (s.ok()) s = handler(request, &response);
  if (s.ok()) {
    bool own = false;
    grpc::Status ser = grpc::SerializationTraits<Response>::Serialize(response, raw_response, &own);
    if (!ser.ok()) s = FromGrpcStatus(ser);
  }
  return Finish(ctx, s);
}

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_HANDLER_UTIL_H_
