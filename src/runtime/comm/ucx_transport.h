// Transport over UCX (UCP tag API): one UCP worker per process in
// multi-thread mode, a progress thread that sleeps on the worker's event fd
// when idle, one endpoint per peer with peer-failure handling (a peer that
// dies fails every request that waits on it). UCX offers shared memory
// only to endpoints without that handling, so a peer on the same machine
// (same host name and boot id) gets a second endpoint that carries the
// sends, through shared memory and cross-memory attach; the first one
// still watches the peer, and when it dies what waits on it fails. Other
// transports are UCX's choice (set UCX_TLS to restrict).
#ifndef QUILT_SRC_RUNTIME_COMM_UCX_TRANSPORT_H_
#define QUILT_SRC_RUNTIME_COMM_UCX_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/runtime/comm/rendezvous.h"
#include "src/runtime/comm/transport.h"

namespace quilt {

// How long the progress thread polls without sleeping after the last
// event while operations are in flight; past it, it sleeps on the event fd
// and the next message pays the wake-up (the cost model's
// measured_transport_spin_s).
inline constexpr double kUcxSpinSeconds = 300e-6;

// How long it polls without sleeping while operations are in flight and
// the process's compute waits (Transport::SetComputeIdle), counted from
// the last event or from when the compute went idle, whichever is later:
// a message that arrives meanwhile pays no wake-up, and a wait longer than
// this leaves the cores to other processes. (The cost model charges a
// transfer the wake-up of any participant whose node has not communicated
// within kUcxSpinSeconds: the one whose compute just posted it wakes its
// own transport, so a participant that waited adds nothing.)
inline constexpr double kUcxIdleSpinSeconds = 10e-3;

// Creates the worker, exchanges addresses through `rendezvous` and
// connects to every other rank. Errors: UNAVAILABLE (UCX could not start),
// DEADLINE_EXCEEDED (ranks missing at the rendezvous).
// `names` (optional): what each rank is (e.g. its node), for error messages.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(int rank, int size,
                                                              Rendezvous* rendezvous,
                                                              absl::Duration timeout,
                                                              std::vector<std::string> names = {});

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_COMM_UCX_TRANSPORT_H_
