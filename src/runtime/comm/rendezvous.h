// How the processes of a job find each other: each publishes its transport
// address under its rank, then waits until every rank has. Now a shared
// directory (one file per rank, written atomically); the coordinator's
// store later.
#ifndef QUILT_SRC_RUNTIME_COMM_RENDEZVOUS_H_
#define QUILT_SRC_RUNTIME_COMM_RENDEZVOUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace quilt {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Publishes `address` for `rank`, then returns every rank's address.
  // Errors: DEADLINE_EXCEEDED naming the ranks still missing.
  virtual absl::StatusOr<std::vector<std::string>> Exchange(int rank, int size,
                                                            const std::string& address,
                                                            absl::Duration timeout) = 0;
};

class DirectoryRendezvous final : public Rendezvous {
 public:
  // `dir` must exist and be shared by every rank (a local or network path).
  explicit DirectoryRendezvous(std::string dir) : dir_(std::move(dir)) {}
  absl::StatusOr<std::vector<std::string>> Exchange(int rank, int size, const std::string& address,
                                                    absl::Duration timeout) override;

 private:
  std::string dir_;
};

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_COMM_RENDEZVOUS_H_
