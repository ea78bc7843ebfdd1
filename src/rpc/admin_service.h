// gRPC adapter of AdminService (operators → coordinator): cluster status for
// `quiltctl status` and `quiltctl nodes`, removing a Down node (`quiltctl
// forget`) and draining one (`quiltctl drain`, `undrain`). Raw methods, see
// handler_util.h.
#ifndef QUILT_SRC_RPC_ADMIN_SERVICE_H_
#define QUILT_SRC_RPC_ADMIN_SERVICE_H_

#include "proto/quilt/v1/services.grpc.pb.h"
#include "src/coordinator/coordinator.h"

namespace quilt::rpc {

inline constexpr size_t kMaxAdminRequestBytes = 64 << 10;

using AdminServiceBase = quilt::v1::AdminService::WithRawCallbackMethod_GetClusterStatus<
    quilt::v1::AdminService::WithRawCallbackMethod_ForgetNode<
        quilt::v1::AdminService::WithRawCallbackMethod_SetNodeDraining<
            quilt::v1::AdminService::Service>>>;

class AdminServiceImpl final : public AdminServiceBase {
 public:
  explicit AdminServiceImpl(Coordinator* coordinator) : coordinator_(coordinator) {}

  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* ctx,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ForgetNode(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SetNodeDraining(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;

 private:
  absl::Status ClusterStatus(const quilt::v1::GetClusterStatusRequest& request,
                             quilt::v1::ClusterStatus* response);
  Coordinator* coordinator_;
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_ADMIN_SERVICE_H_
