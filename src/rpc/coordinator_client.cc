#include "src/rpc/coordinator_client.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/quilt/v1/services.grpc.pb.h"
#include "src/common/status.h"
#include "src/rpc/channel.h"
#include "src/rpc/security.h"
#include "src/rpc/status_conversion.h"

namespace quilt::rpc {
namespace {

// Transport errors name the address; the server's own errors pass through.
// `daemon`: the caller is a worker or an executor (its hint names its
// setting, not quiltctl's).
absl::Status CallStatus(const grpc::Status& s, const std::string& address, bool daemon = false) {
  absl::Status status = FromGrpcStatus(s);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // A coordinator serving TLS closes a plaintext connection at once
    // ("Socket closed"); nothing listening, or a coordinator on its way
    // down, is another matter.
    // Over TLS, a coordinator that asks for client certificates closes
    // the connection of a client it does not accept.
    const ClientSecurity security = CurrentClientSecurity();
    const bool plaintext = security.ca_pem.empty();
    const std::string& m = s.error_message();
    std::string hint;
    if (absl::StrContains(m, "Connection refused")) {
      hint = " (nothing listens there: is the coordinator running, at that address?)";
    } else if (plaintext && !absl::StrContains(m, "shutting down")) {
      hint = daemon ? " (if it serves TLS, set tls_ca_file and token_file, or tls_cert_file and "
                      "tls_key_file where it asks for client certificates)"
                    : " (if it serves TLS, pass --tls-ca and --token-file, or --tls-cert and "
                      "--tls-key where it asks for client certificates)";
    } else if (!absl::StrContains(m, "Socket closed") || absl::StrContains(m, "shutting down")) {
      // Not a closed handshake.
    } else if (security.cert_pem.empty()) {
      hint = daemon ? " (if it asks for client certificates, set tls_cert_file and tls_key_file)"
                    : " (if it asks for client certificates, pass --tls-cert and --tls-key)";
    } else {
      hint =
          " (if it asks for client certificates, it did not accept this one: is it signed by a "
          "CA of the coordinator's tls_client_ca_file?)";
    }
    return absl::Status(status.code(), absl::StrCat("coordinator at ", address,
                                                    " is unreachable: ", status.message(), hint));
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && daemon) {
    return absl::Status(status.code(), absl::StrCat("coordinator at ", address,
                                                    " did not answer in time (rpc_timeout_ms): ",
                                                    status.message()));
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // Unreachable, or busy (planning waits for the workers' profiles).
    return absl::Status(status.code(),
                        absl::StrCat("coordinator at ", address,
                                     " did not answer in time (unreachable, or busy planning; "
                                     "--timeout gives it longer): ",
                                     status.message()));
  }
  if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
      absl::StrContains(s.error_message(), "larger than max")) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request is larger than the coordinator at ", address,
                     " accepts (its max_request_bytes setting): ", status.message()));
  }
  return status;
}

// One unary JobService call with the client's deadline, failing fast when
// the coordinator is down.
template <typename Request, typename Response>
absl::StatusOr<Response> Unary(quilt::v1::JobService::Stub* stub,
                               grpc::Status (quilt::v1::JobService::Stub::*method)(
                                   grpc::ClientContext*, const Request&, Response*),
                               const Request& request, absl::Duration timeout,
                               const std::string& address) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout);
  ctx.set_wait_for_ready(false);
  Response response;
  grpc::Status s = (stub->*method)(&ctx, request, &response);
  if (!s.ok()) return CallStatus(s, address);
  return response;
}

}  // namespace

struct CoordinatorClient::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<quilt::v1::ClusterService::Stub> cluster;
};

CoordinatorClient::CoordinatorClient(const std::string& address, absl::Duration timeout)
    : address_(address), timeout_(timeout), stubs_(new Stubs) {
  stubs_->channel = MakeChannel(address);
  stubs_->cluster = quilt::v1::ClusterService::NewStub(stubs_->channel);
}

bool CoordinatorClient::WaitForConnection(absl::Duration timeout) {
  // Asks for a connection now (an idle channel waits for a call otherwise)
  // and waits for it.
  return stubs_->channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout));
}

CoordinatorClient::~CoordinatorClient() = default;

absl::StatusOr<quilt::v1::RegisterResponse> CoordinatorClient::Register(
    const quilt::v1::RegisterRequest& request) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  quilt::v1::RegisterResponse response;
  grpc::Status s = stubs_->cluster->Register(&ctx, request, &response);
  if (!s.ok()) return CallStatus(s, address_, /*daemon=*/true);
  return response;
}

absl::StatusOr<quilt::v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const quilt::v1::HeartbeatRequest& request) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  quilt::v1::HeartbeatResponse response;
  grpc::Status s = stubs_->cluster->Heartbeat(&ctx, request, &response);
  if (!s.ok()) return CallStatus(s, address_, /*daemon=*/true);
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

absl::Status AdminClient::ForgetNode(const std::string& node_id) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  ctx.set_wait_for_ready(false);
  quilt::v1::ForgetNodeRequest request;
  request.set_node_id(node_id);
  quilt::v1::ForgetNodeResponse response;
  grpc::Status s = stubs_->admin->ForgetNode(&ctx, request, &response);
  return s.ok() ? absl::OkStatus() : CallStatus(s, address_);
}

absl::StatusOr<quilt::v1::SetNodeDrainingResponse> AdminClient::SetNodeDraining(
    const std::string& node_id, bool draining) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout_);
  ctx.set_wait_for_ready(false);
  quilt::v1::SetNodeDrainingRequest request;
  request.set_node_id(node_id);
  request.set_draining(draining);
  quilt::v1::SetNodeDrainingResponse response;
  grpc::Status s = stubs_->admin->SetNodeDraining(&ctx, request, &response);
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
  return Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::PlanJob, request, timeout_,
               address_);
}

absl::StatusOr<std::string> JobClient::SubmitJob(const quilt::v1::JobSpec& spec) {
  quilt::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  ASSIGN_OR_RETURN(quilt::v1::SubmitJobResponse response,
                   Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::SubmitJob, request,
                         timeout_, address_));
  return response.job_id();
}

absl::StatusOr<quilt::v1::JobStatus> JobClient::GetJob(const std::string& job_id) {
  quilt::v1::GetJobRequest request;
  request.set_job_id(job_id);
  return Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::GetJob, request, timeout_,
               address_);
}

absl::StatusOr<std::vector<quilt::v1::JobStatus>> JobClient::ListJobs() {
  ASSIGN_OR_RETURN(quilt::v1::ListJobsResponse response,
                   Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::ListJobs,
                         quilt::v1::ListJobsRequest(), timeout_, address_));
  return std::vector<quilt::v1::JobStatus>(response.jobs().begin(), response.jobs().end());
}

absl::Status JobClient::CancelJob(const std::string& job_id, const std::string& reason) {
  quilt::v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  return Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::CancelJob, request, timeout_,
               address_)
      .status();
}

absl::StatusOr<std::string> JobClient::DeleteJob(const std::string& job_id, bool keep_checkpoints) {
  quilt::v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  request.set_keep_checkpoints(keep_checkpoints);
  ASSIGN_OR_RETURN(quilt::v1::DeleteJobResponse response,
                   Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::DeleteJob, request,
                         timeout_, address_));
  return response.removed_checkpoints();
}

absl::StatusOr<quilt::v1::JobLosses> JobClient::GetJobLosses(const std::string& job_id,
                                                             int64_t from_step) {
  quilt::v1::GetJobLossesRequest request;
  request.set_job_id(job_id);
  request.set_from_step(from_step);
  return Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::GetJobLosses, request, timeout_,
               address_);
}

absl::StatusOr<quilt::v1::GetJobLogsResponse> JobClient::GetJobLogs(
    const std::string& job_id, int lines, const std::string& node,
    const std::map<std::string, int64_t>& offsets, int run) {
  quilt::v1::GetJobLogsRequest request;
  request.set_job_id(job_id);
  request.set_lines(lines);
  request.set_node(node);
  request.set_run(run);
  for (const auto& [n, offset] : offsets) (*request.mutable_offsets())[n] = offset;
  return Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::GetJobLogs, request, timeout_,
               address_);
}

absl::StatusOr<quilt::v1::ExportJobResponse> JobClient::ExportJob(const std::string& job_id,
                                                                  quilt::v1::ExportFormat format) {
  quilt::v1::ExportJobRequest request;
  request.set_job_id(job_id);
  request.set_format(format);
  return Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::ExportJob, request, timeout_,
               address_);
}

absl::StatusOr<quilt::v1::ResumeJobResponse> JobClient::ResumeJob(const std::string& job_id,
                                                                  const std::string& strategy,
                                                                  bool queue) {
  quilt::v1::ResumeJobRequest request;
  request.set_job_id(job_id);
  request.set_strategy(strategy);
  request.set_queue(queue);
  return Unary(stubs_->jobs.get(), &quilt::v1::JobService::Stub::ResumeJob, request, timeout_,
               address_);
}

absl::Status JobClient::WatchJob(
    const std::string& job_id, const std::function<void(const quilt::v1::JobStatus&)>& on_status) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(false);
  quilt::v1::WatchJobRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReader<quilt::v1::JobStatus>> reader =
      stubs_->jobs->WatchJob(&ctx, request);
  quilt::v1::JobStatus status;
  while (reader->Read(&status)) on_status(status);
  grpc::Status s = reader->Finish();
  return s.ok() ? absl::OkStatus() : CallStatus(s, address_);
}

struct CoordinatorRendezvous::Stubs {
  std::unique_ptr<quilt::v1::ClusterService::Stub> cluster;
};

CoordinatorRendezvous::CoordinatorRendezvous(const std::string& address, std::string job_id)
    : address_(address), job_id_(std::move(job_id)), stubs_(new Stubs) {
  stubs_->cluster = quilt::v1::ClusterService::NewStub(MakeChannel(address));
}

CoordinatorRendezvous::~CoordinatorRendezvous() = default;

absl::StatusOr<std::vector<std::string>> CoordinatorRendezvous::Exchange(int rank, int size,
                                                                         const std::string& address,
                                                                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  quilt::v1::ExchangeAddressesRequest request;
  request.set_job_id(job_id_);
  request.set_rank(rank);
  request.set_size(size);
  request.set_address(address);
  absl::Status last = absl::OkStatus();
  while (absl::Now() < deadline) {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, std::min(absl::Seconds(5), deadline - absl::Now()));
    quilt::v1::ExchangeAddressesResponse response;
    grpc::Status s = stubs_->cluster->ExchangeAddresses(&ctx, request, &response);
    if (s.ok() && response.addresses_size() == size) {
      return std::vector<std::string>(response.addresses().begin(), response.addresses().end());
    }
    if (!s.ok()) {
      last = CallStatus(s, address_, /*daemon=*/true);
      // Only an unreachable or stopping coordinator (which cancels the
      // calls it has) is worth asking again.
      if (last.code() != absl::StatusCode::kUnavailable &&
          last.code() != absl::StatusCode::kDeadlineExceeded &&
          last.code() != absl::StatusCode::kCancelled) {
        return last;
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job_id_, ": not every executor published its address within ",
                   absl::FormatDuration(timeout),
                   last.ok() ? "" : "; last error: ", last.ok() ? "" : last.message()));
}

}  // namespace quilt::rpc
