#include "src/rpc/coordinator_client.h"

#include "absl/strings/str_cat.h"
#include "proto/quilt/v1/services.grpc.pb.h"
#include "src/rpc/channel.h"
#include "src/rpc/status_conversion.h"

namespace quilt::rpc {
namespace {

// Transport errors name the address; the server's own errors pass through.
absl::Status CallStatus(const grpc::Status& s, const std::string& address) {
  absl::Status status = FromGrpcStatus(s);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::Status(status.code(), absl::StrCat("coordinator at ", address,
                                                    " is unreachable: ", status.message()));
  }
  return status;
}

}  // namespace

struct CoordinatorClient::Stubs {
  std::unique_ptr<quilt::v1::ClusterService::Stub> cluster;
};

CoordinatorClient::CoordinatorClient(const std::string& address, absl::Duration timeout)
    : address_(address), timeout_(timeout), stubs_(new Stubs) {
  stubs_->cluster = quilt::v1::ClusterService::NewStub(MakeChannel(address));
}

CoordinatorClient::~CoordinatorClient() = default;

absl::StatusOr<quilt::v1::RegisterResponse> CoordinatorClient::Register(
    const quilt::v1::RegisterRequest& request) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  quilt::v1::RegisterResponse response;
  grpc::Status s = stubs_->cluster->Register(&ctx, request, &response);
  if (!s.ok()) return CallStatus(s, address_);
  return response;
}

absl::StatusOr<quilt::v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const quilt::v1::HeartbeatRequest& request) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  quilt::v1::HeartbeatResponse response;
  grpc::Status s = stubs_->cluster->Heartbeat(&ctx, request, &response);
  if (!s.ok()) return CallStatus(s, address_);
  return response;
}

struct AdminClient::Stubs {
  std::unique_ptr<quilt::v1::AdminService::Stub> admin;
};

AdminClient::AdminClient(const std::string& address, absl::Duration timeout)
    : address_(address), timeout_(timeout), stubs_(new Stubs) {
  stubs_->admin = quilt::v1::AdminService::NewStub(MakeChannel(address));
}

AdminClient::~AdminClient() = default;

absl::StatusOr<quilt::v1::ClusterStatus> AdminClient::GetClusterStatus(
    const quilt::v1::GetClusterStatusRequest& request) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  // Fail fast when the coordinator is down instead of waiting for it.
  ctx.set_wait_for_ready(false);
  quilt::v1::ClusterStatus response;
  grpc::Status s = stubs_->admin->GetClusterStatus(&ctx, request, &response);
  if (!s.ok()) return CallStatus(s, address_);
  return response;
}

struct JobClient::Stubs {
  std::unique_ptr<quilt::v1::JobService::Stub> jobs;
};

JobClient::JobClient(const std::string& address, absl::Duration timeout)
    : address_(address), timeout_(timeout), stubs_(new Stubs) {
  stubs_->jobs = quilt::v1::JobService::NewStub(MakeChannel(address));
}

JobClient::~JobClient() = default;

absl::StatusOr<quilt::v1::PlanReport> JobClient::PlanJob(const quilt::v1::PlanJobRequest& request) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  ctx.set_wait_for_ready(false);
  quilt::v1::PlanReport response;
  grpc::Status s = stubs_->jobs->PlanJob(&ctx, request, &response);
  if (!s.ok()) return CallStatus(s, address_);
  return response;
}

}  // namespace quilt::rpc
