// gRPC adapter of ClusterService (workers → coordinator) onto the
// coordinator's NodeRegistry. Handlers run on gRPC's callback threads and
// call the thread-safe registry directly (each call is short). Methods are
// raw so that malformed requests get INVALID_ARGUMENT (see handler_util.h).
#ifndef QUILT_SRC_RPC_CLUSTER_SERVICE_H_
#define QUILT_SRC_RPC_CLUSTER_SERVICE_H_

#include "proto/quilt/v1/services.grpc.pb.h"
#include "src/coordinator/job_logs.h"
#include "src/coordinator/job_manager.h"
#include "src/coordinator/link_probes.h"
#include "src/coordinator/model_profiles.h"
#include "src/coordinator/node_registry.h"

namespace quilt::rpc {

// Per-method request limits (the registration carries the device list).
inline constexpr size_t kMaxRegisterRequestBytes = 4 << 20;
inline constexpr size_t kMaxHeartbeatRequestBytes = 4 << 20;  // with task reports

using ClusterServiceBase = quilt::v1::ClusterService::WithRawCallbackMethod_Register<
    quilt::v1::ClusterService::WithRawCallbackMethod_Heartbeat<
        quilt::v1::ClusterService::WithRawCallbackMethod_ExchangeAddresses<
            quilt::v1::ClusterService::Service>>>;

class ClusterServiceImpl final : public ClusterServiceBase {
 public:
  ClusterServiceImpl(NodeRegistry* registry, JobManager* jobs, LinkProbes* links,
                     ModelProfiles* profiles, JobLogs* logs)
      : registry_(registry), jobs_(jobs), links_(links), profiles_(profiles), logs_(logs) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // Answers at once (the executors poll).
  grpc::ServerUnaryReactor* ExchangeAddresses(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) override;

 private:
  NodeRegistry* registry_;
  JobManager* jobs_;
  LinkProbes* links_;
  ModelProfiles* profiles_;
  JobLogs* logs_;
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_CLUSTER_SERVICE_H_
