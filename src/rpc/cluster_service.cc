#include "src/rpc/cluster_service.h"

#include "src/common/version.h"
#include "src/rpc/handler_util.h"

namespace quilt::rpc {

using quilt::v1::HeartbeatRequest;
using quilt::v1::HeartbeatResponse;
using quilt::v1::RegisterRequest;
using quilt::v1::RegisterResponse;

grpc::ServerUnaryReactor* ClusterServiceImpl::Register(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return HandleUnary<RegisterRequest, RegisterResponse>(
      ctx, request, response, kMaxRegisterRequestBytes, "Register",
      [this](const RegisterRequest& req, RegisterResponse* resp) {
        absl::Status s = registry_->Register(req.node(), req.incarnation());
        if (!s.ok()) return s;
        resp->set_heartbeat_period_s(absl::ToDoubleSeconds(registry_->options().heartbeat_period));
        resp->set_coordinator_version(kVersion);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::Heartbeat(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  return HandleUnary<HeartbeatRequest, HeartbeatResponse>(
      ctx, request, response, kMaxHeartbeatRequestBytes, "Heartbeat",
      [this](const HeartbeatRequest& req, HeartbeatResponse* resp) {
        absl::Status s = registry_->Heartbeat(req.node_id(), req.incarnation());
        if (!s.ok()) return s;
        resp->set_heartbeat_period_s(absl::ToDoubleSeconds(registry_->options().heartbeat_period));
        jobs_->OnHeartbeat(req, resp);
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::ExchangeAddresses(
    grpc::ServerContext*, const quilt::v1::ExchangeAddressesRequest* request,
    quilt::v1::ExchangeAddressesResponse* response) {
  absl::StatusOr<std::vector<std::string>> all = jobs_->ExchangeAddresses(
      request->job_id(), request->rank(), request->size(), request->address());
  if (!all.ok()) return ToGrpcStatus(all.status());
  for (const std::string& a : *all) response->add_addresses(a);
  return grpc::Status::OK;
}

}  // namespace quilt::rpc
