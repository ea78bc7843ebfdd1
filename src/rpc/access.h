// Who may call what: the coordinator's clients by name and role. A
// tokens file holds one client a line, "NAME ROLE TOKEN" ('#' starts a
// comment), or "NAME ROLE certificate" for the client that presents a
// client certificate of common name NAME (mutual TLS) and no token; the
// role sets the methods the client may call:
//   admin   everything (the single token_file's token is an admin's);
//   user    jobs (submit, plan, cancel, resume, delete, export, logs) and
//           what a viewer reads;
//   viewer  reads only: cluster status, jobs, a job, its watch and losses;
//   worker  what workers and their executors call (register, heartbeat,
//           address exchange), nothing else; optionally for named nodes
//           only ("nodes=gpu-0*,gpu-10").
// Every role may ask the health service (Check, Watch). A method not listed is an
// admin's alone, so a method added later is closed until it is listed.
#ifndef QUILT_SRC_RPC_ACCESS_H_
#define QUILT_SRC_RPC_ACCESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quilt::rpc {

enum class Role { kAdmin, kUser, kViewer, kWorker };

const char* RoleName(Role role);

// A tokens-file line's third word that names a certificate client.
inline constexpr char kCertificateWord[] = "certificate";

struct ClientToken {
  std::string name;
  Role role = Role::kAdmin;
  std::string token;  // empty: the client of the certificate named `name`
  // A worker's nodes: the node ids (globs, '*' any run of characters) it
  // may register and heartbeat as, and whose executors it may exchange
  // addresses for; empty: any node.
  std::vector<std::string> nodes;
};

// Whether `node` matches one of `patterns` (globs; empty: any node).
bool NodeMatches(const std::vector<std::string>& patterns, const std::string& node);

// Whether `role` may call `method`, a gRPC path ("/quilt.v1.JobService/
// SubmitJob").
bool RoleAllows(Role role, absl::string_view method);

// A token is one word of printable ASCII. Errors: INVALID_ARGUMENT naming
// `what` and the problem.
absl::Status CheckToken(absl::string_view token, const std::string& what);

// What the coordinator takes as a client's token: CheckToken's, and at
// least 16 characters (a token is a secret, not a password to remember).
absl::Status CheckServerToken(absl::string_view token, const std::string& what);
// A client's name: 1–64 letters, digits, '.', '_' or '-' (it goes into
// messages and logs).
absl::Status CheckClientName(absl::string_view name);

// A worker's line may end in a fourth word, nodes=PATTERN[,PATTERN…], that
// binds its token (or certificate) to those nodes. Errors: INVALID_ARGUMENT naming the file
// and line (unreadable, not three words (or four, a worker's), a name or
// token not as above, an unknown role, a name or token given twice, no
// client at all). A word that begins with '#' starts a comment; a token
// may hold '#' within it.
absl::StatusOr<std::vector<ClientToken>> LoadTokensFile(const std::string& path);

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_ACCESS_H_
