// Transport over UCX (UCP tag API): one UCP worker per process in
// multi-thread mode, a progress thread that sleeps on the worker's event fd
// when idle, one endpoint per peer with peer-failure handling (a peer that
// dies fails every request that waits on it). Which UCX transports carry
// the data is UCX's choice (shared memory and TCP on one host; set
// UCX_TLS to restrict).
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
