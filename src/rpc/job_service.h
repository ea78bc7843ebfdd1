// gRPC adapter of JobService (clients → coordinator). PlanJob builds the
// job's training graph, takes the live cluster (Ready nodes) and returns
// every baseline's prediction; planning is CPU-heavy (seconds for large
// models), so it runs on a small work queue instead of gRPC's callback
// threads, and a full queue answers RESOURCE_EXHAUSTED at once. The other
// methods are not served yet (UNIMPLEMENTED).
#ifndef QUILT_SRC_RPC_JOB_SERVICE_H_
#define QUILT_SRC_RPC_JOB_SERVICE_H_

#include "proto/quilt/v1/services.grpc.pb.h"
#include "src/common/work_queue.h"
#include "src/coordinator/coordinator.h"

namespace quilt::rpc {

using JobServiceBase =
    quilt::v1::JobService::WithRawCallbackMethod_PlanJob<quilt::v1::JobService::Service>;

class JobServiceImpl final : public JobServiceBase {
 public:
  // `max_request_bytes`: the largest PlanJob request (graphs and ONNX files
  // travel inside it).
  JobServiceImpl(Coordinator* coordinator, size_t max_request_bytes);
  ~JobServiceImpl() override;

  grpc::ServerUnaryReactor* PlanJob(grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

  // Runs the accepted plans to completion; call before the server shuts down.
  void Drain() { planning_.Shutdown(); }

 private:
  absl::Status Plan(const quilt::v1::PlanJobRequest& request, quilt::v1::PlanReport* report);

  Coordinator* coordinator_;
  size_t max_request_bytes_;
  WorkQueue planning_;
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_JOB_SERVICE_H_
