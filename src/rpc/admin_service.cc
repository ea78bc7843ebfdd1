#include "src/rpc/admin_service.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/common/version.h"
#include "src/coordinator/job_manager.h"
#include "src/rpc/handler_util.h"

namespace quilt::rpc {

grpc::ServerUnaryReactor* AdminServiceImpl::GetClusterStatus(grpc::CallbackServerContext* ctx,
                                                             const grpc::ByteBuffer* request,
                                                             grpc::ByteBuffer* response) {
  return HandleUnary<quilt::v1::GetClusterStatusRequest, quilt::v1::ClusterStatus>(
      ctx, request, response, kMaxAdminRequestBytes, "GetClusterStatus",
      [this](const auto& req, auto* resp) { return ClusterStatus(req, resp); });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ForgetNode(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return HandleUnary<quilt::v1::ForgetNodeRequest, quilt::v1::ForgetNodeResponse>(
      ctx, request, response, kMaxAdminRequestBytes, "ForgetNode",
      [this](const quilt::v1::ForgetNodeRequest& req, quilt::v1::ForgetNodeResponse*) {
        return coordinator_->registry()->Forget(req.node_id());
      });
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetNodeDraining(grpc::CallbackServerContext* ctx,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return HandleUnary<quilt::v1::SetNodeDrainingRequest, quilt::v1::SetNodeDrainingResponse>(
      ctx, request, response, kMaxAdminRequestBytes, "SetNodeDraining",
      [this](const quilt::v1::SetNodeDrainingRequest& req,
             quilt::v1::SetNodeDrainingResponse* resp) -> absl::Status {
        ASSIGN_OR_RETURN(const bool changed,
                         coordinator_->registry()->SetDraining(req.node_id(), req.draining()));
        resp->set_changed(changed);
        for (const std::string& job :
             JobManager::ActiveJobsByNode(coordinator_->jobs()->List())[req.node_id()]) {
          resp->add_running_jobs(job);
        }
        return absl::OkStatus();
      });
}

absl::Status AdminServiceImpl::ClusterStatus(const quilt::v1::GetClusterStatusRequest& request,
                                             quilt::v1::ClusterStatus* response) {
  NodeRegistry* registry = coordinator_->registry();
  // Jobs not ended, and what their plans hold on each node.
  const std::vector<quilt::v1::JobStatus> jobs = coordinator_->jobs()->List();
  std::map<std::string, std::vector<std::string>> running = JobManager::ActiveJobsByNode(jobs);
  std::map<std::string, int64_t> memory;
  for (const quilt::v1::JobStatus& job : jobs) {
    if (JobManager::Ended(job.state())) continue;
    for (const auto& [node, bytes] : job.predicted_memory_bytes()) memory[node] += bytes;
  }
  std::set<std::string> ready;
  for (quilt::v1::NodeStatus& n : registry->ListNodes()) {
    const std::string& id = n.info().node_id();
    if (n.state() == quilt::v1::NODE_STATE_READY) ready.insert(id);
    for (const std::string& job : running[id]) n.add_running_jobs(job);
    n.set_memory_used_bytes(memory[id]);
    *response->add_nodes() = std::move(n);
  }
  const int max_events = request.max_events() > 0 ? std::min(request.max_events(), 1000) : 20;
  for (quilt::v1::ClusterEvent& e : registry->RecentEvents(max_events)) {
    *response->add_recent_events() = std::move(e);
  }
  for (const auto& [state, n] : coordinator_->jobs()->CountByState()) {
    (*response->mutable_jobs_by_state())[state] = n;
  }
  // Between Ready nodes only (not a forgotten or Down node's).
  for (quilt::v1::MeasuredLink& l : coordinator_->links()->Links()) {
    if (ready.count(l.src_node()) && ready.count(l.dst_node()))
      *response->add_links() = std::move(l);
  }
  response->set_coordinator_version(kVersion);
  response->set_coordinator_uptime_s(
      absl::ToDoubleSeconds(coordinator_->clock()->Now() - coordinator_->start_time()));
  response->set_not_ready_after_s(absl::ToDoubleSeconds(registry->options().not_ready_after));
  response->set_down_after_s(absl::ToDoubleSeconds(registry->options().down_after));
  return absl::OkStatus();
}

}  // namespace quilt::rpc
