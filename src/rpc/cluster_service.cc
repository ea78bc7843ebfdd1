#include "src/rpc/cluster_service.h"

#include "src/common/status.h"
#include "src/common/version.h"
#include "src/rpc/handler_util.h"
#include "src/rpc/security.h"

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
      [this, ctx](const RegisterRequest& req, RegisterResponse* resp) {
        RETURN_IF_ERROR(CheckCallerNode(ctx, req.node().node_id()));
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
      [this, ctx](const HeartbeatRequest& req, HeartbeatResponse* resp) {
        RETURN_IF_ERROR(CheckCallerNode(ctx, req.node_id()));
        // A stopping worker's executors' last reports (the job failed: its
        // worker was stopped) are applied first, then its node goes Down at
        // once (not Ready first): the other way round, a liveness check in
        // between failed its jobs as "node is down".
        RETURN_IF_ERROR(req.stopping() ? registry_->Check(req.node_id(), req.incarnation())
                                       : registry_->Heartbeat(req.node_id(), req.incarnation()));
        resp->set_heartbeat_period_s(absl::ToDoubleSeconds(registry_->options().heartbeat_period));
        jobs_->OnHeartbeat(req, resp);
        links_->OnHeartbeat(req, resp);
        profiles_->OnHeartbeat(req, resp);
        logs_->OnHeartbeat(req, resp);
        return req.stopping() ? registry_->Leave(req.node_id(), req.incarnation())
                              : absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ExchangeAddresses(grpc::CallbackServerContext* ctx,
                                                                const grpc::ByteBuffer* request,
                                                                grpc::ByteBuffer* response) {
  return HandleUnary<quilt::v1::ExchangeAddressesRequest, quilt::v1::ExchangeAddressesResponse>(
      ctx, request, response, kMaxHeartbeatRequestBytes, "ExchangeAddresses",
      [this, ctx](const quilt::v1::ExchangeAddressesRequest& req,
                  quilt::v1::ExchangeAddressesResponse* resp) {
        // A client bound to nodes publishes only for a rank on one of them.
        if (!CallerNodes(ctx).empty()) {
          absl::StatusOr<quilt::v1::JobRecord> job = jobs_->Record(req.job_id());
          if (job.ok() && req.rank() >= 0 && req.rank() < job->world_size()) {
            RETURN_IF_ERROR(CheckCallerNode(ctx, job->world(req.rank())));
          }
        }
        ASSIGN_OR_RETURN(
            std::vector<std::string> all,
            jobs_->ExchangeAddresses(req.job_id(), req.rank(), req.size(), req.address()));
        for (std::string& a : all) resp->add_addresses(std::move(a));
        return absl::OkStatus();
      });
}

}  // namespace quilt::rpc
