// The executor's point-to-point transport between the processes of a job:
// asynchronous tagged sends and receives of byte buffers, waited on with a
// deadline. Every transfer, collective step and parameter-server message
// of a program goes through it. A message is matched by its 64-bit tag
// alone (tags are unique per step, see tags.h); `peer` names the process
// on the other side for error reporting and liveness.
//
// Implementations: UCX (ucx_transport.h). Thread-safe: any thread may post
// and wait.
#ifndef QUILT_SRC_RUNTIME_COMM_TRANSPORT_H_
#define QUILT_SRC_RUNTIME_COMM_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace quilt {

class CommRequest {
 public:
  virtual ~CommRequest() = default;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The buffer must stay valid (and unchanged, for sends) until Wait
  // returns.
  virtual std::unique_ptr<CommRequest> Send(int peer, uint64_t tag, const void* data,
                                            size_t bytes) = 0;
  virtual std::unique_ptr<CommRequest> Recv(int peer, uint64_t tag, void* data, size_t bytes) = 0;
  // Errors: DEADLINE_EXCEEDED, UNAVAILABLE when the peer is gone, DATA_LOSS
  // when a message of another size arrived; each names the peer and the
  // tag. A request that failed or timed out is cancelled.
  virtual absl::Status Wait(CommRequest* request, absl::Time deadline) = 0;
  // Whether the transport has seen the peer fail.
  virtual bool PeerFailed(int peer) const = 0;
};

// Sends and receives at once, then waits for both.
absl::Status Exchange(Transport* t, int send_peer, uint64_t send_tag, const void* send_data,
                      size_t send_bytes, int recv_peer, uint64_t recv_tag, void* recv_data,
                      size_t recv_bytes, absl::Time deadline);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_COMM_TRANSPORT_H_
