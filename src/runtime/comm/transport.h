// The executor's point-to-point transport between the processes of a job:
// asynchronous tagged sends and receives of byte buffers whose completion
// is reported by a callback, so that no thread blocks while a transfer,
// a collective step or a parameter-server message is in flight. A message
// is matched by its 64-bit tag alone (tags are unique per step, see
// tags.h); `peer` names the process on the other side for liveness and
// errors.
//
// Callbacks run exactly once, on the transport's progress thread (never
// inside Send/Recv), and may post further operations. A peer that fails
// fails every operation waiting on it. Thread-safe.
//
// Implementations: UCX (ucx_transport.h).
#ifndef QUILT_SRC_RUNTIME_COMM_TRANSPORT_H_
#define QUILT_SRC_RUNTIME_COMM_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace quilt {

// Errors given to callbacks: UNAVAILABLE when the peer failed, DATA_LOSS
// when a message of another size arrived, CANCELLED after CancelAll; each
// names the peer and the tag.
using CommCallback = std::function<void(absl::Status)>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The buffer must stay valid (and unchanged, for sends) until the
  // callback runs. Returns the operation's id (for Cancel).
  virtual uint64_t Send(int peer, uint64_t tag, const void* data, size_t bytes,
                        CommCallback done) = 0;
  virtual uint64_t Recv(int peer, uint64_t tag, void* data, size_t bytes, CommCallback done) = 0;
  // Cancels one operation if it is still pending (its callback gets
  // CANCELLED; a finished one is left alone).
  virtual void Cancel(uint64_t id) = 0;
  // Whether the transport has seen the peer fail.
  virtual bool PeerFailed(int peer) const = 0;
  // Cancels every pending operation (their callbacks get CANCELLED);
  // returns once all callbacks ran.
  virtual void CancelAll() = 0;
  // Tells the transport whether this process's compute is waiting (every
  // device thread idle): a transport that polls for a while after each
  // event may then keep polling while operations are pending, as the
  // cores it would take from kernels are not in use. A hint only.
  virtual void SetComputeIdle(bool idle) {}
};

// Blocking forms for simple uses: post, then wait for the callback until
// `deadline` (DEADLINE_EXCEEDED names the peer and tag; the operation is
// cancelled, and may yet complete into `data`: pass `keep`, owning it, to
// keep it alive until then).
absl::Status SendSync(Transport* t, int peer, uint64_t tag, const void* data, size_t bytes,
                      absl::Time deadline, std::shared_ptr<const void> keep = nullptr);
absl::Status RecvSync(Transport* t, int peer, uint64_t tag, void* data, size_t bytes,
                      absl::Time deadline, std::shared_ptr<const void> keep = nullptr);

// Every process waits until every process has called it with the same `id`
// (through rank 0). Errors: as RecvSync, naming the rank that is missing.
absl::Status Barrier(Transport* t, uint64_t id, absl::Time deadline);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_COMM_TRANSPORT_H_
