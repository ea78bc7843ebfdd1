#include "src/rpc/access.h"

#include <fnmatch.h>

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/common/files.h"
#include "src/common/status.h"

namespace quilt::rpc {
namespace {

constexpr absl::string_view kHealthMethods[] = {"/grpc.health.v1.Health/Check",
                                                "/grpc.health.v1.Health/Watch"};
constexpr size_t kMinTokenChars = 16;

// What each role below admin may call, by gRPC path.
constexpr absl::string_view kViewerMethods[] = {
    "/quilt.v1.AdminService/GetClusterStatus", "/quilt.v1.JobService/GetJob",
    "/quilt.v1.JobService/ListJobs",           "/quilt.v1.JobService/WatchJob",
    "/quilt.v1.JobService/GetJobLosses",
};
constexpr absl::string_view kUserMethods[] = {
    "/quilt.v1.JobService/SubmitJob",  "/quilt.v1.JobService/PlanJob",
    "/quilt.v1.JobService/CancelJob",  "/quilt.v1.JobService/ResumeJob",
    "/quilt.v1.JobService/DeleteJob",  "/quilt.v1.JobService/ExportJob",
    "/quilt.v1.JobService/GetJobLogs",
};
constexpr absl::string_view kWorkerMethods[] = {
    "/quilt.v1.ClusterService/Register",
    "/quilt.v1.ClusterService/Heartbeat",
    "/quilt.v1.ClusterService/ExchangeAddresses",
};

template <size_t N>
bool Listed(const absl::string_view (&methods)[N], absl::string_view method) {
  for (absl::string_view m : methods) {
    if (m == method) return true;
  }
  return false;
}

bool ParseRole(absl::string_view text, Role* role) {
  for (Role r : {Role::kAdmin, Role::kUser, Role::kViewer, Role::kWorker}) {
    if (text == RoleName(r)) {
      *role = r;
      return true;
    }
  }
  return false;
}

}  // namespace

bool NodeMatches(const std::vector<std::string>& patterns, const std::string& node) {
  if (patterns.empty()) return true;
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), node.c_str(), 0) == 0) return true;
  }
  return false;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kUser:
      return "user";
    case Role::kViewer:
      return "viewer";
    case Role::kWorker:
      return "worker";
  }
  return "?";
}

bool RoleAllows(Role role, absl::string_view method) {
  if (Listed(kHealthMethods, method)) return true;
  switch (role) {
    case Role::kAdmin:
      return true;
    case Role::kUser:
      return Listed(kUserMethods, method) || Listed(kViewerMethods, method);
    case Role::kViewer:
      return Listed(kViewerMethods, method);
    case Role::kWorker:
      return Listed(kWorkerMethods, method);
  }
  return false;
}

absl::Status CheckToken(absl::string_view token, const std::string& what) {
  if (token.empty()) return absl::InvalidArgumentError(what + " is empty");
  for (char c : token) {
    // A header value: printable ASCII, one word.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          what + " must hold one token of printable characters without spaces (on one line)");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckServerToken(absl::string_view token, const std::string& what) {
  RETURN_IF_ERROR(CheckToken(token, what));
  if (token.size() < kMinTokenChars) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", token.size(),
                                                   " characters: a token needs at least ",
                                                   kMinTokenChars, " (e.g. openssl rand -hex 32)"));
  }
  return absl::OkStatus();
}

absl::Status CheckClientName(absl::string_view name) {
  if (name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("the client name '", name.substr(0, 64), "…' is longer than 64 characters"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("the client name '", absl::CHexEscape(name),
                       "' may hold only letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ClientToken>> LoadTokensFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tokens file ", path, " cannot be read: ", text.status().message()));
  }
  std::vector<ClientToken> out;
  std::set<std::string> names, tokens;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++number;
    const std::string where = absl::StrCat("the tokens file ", path, ", line ", number);
    // A comment starts with a word that begins with '#' (a token may hold
    // '#' in it).
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    for (size_t w = 0; w < words.size(); ++w) {
      if (absl::StartsWith(words[w], "#")) {
        words.resize(w);
        break;
      }
    }
    if (words.empty()) continue;
    if (words.size() != 3 && words.size() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected NAME ROLE TOKEN or NAME ROLE certificate (three ",
                       "words; a worker's may add nodes=…), found ", words.size(), " words"));
    }
    ClientToken t;
    t.name = std::string(words[0]);
    if (absl::Status s = CheckClientName(t.name); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
    if (!ParseRole(words[1], &t.role)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown role '", words[1], "' (admin, user, viewer or worker)"));
    }
    // "certificate": the client presenting a certificate of common name
    // NAME (no token; shorter than any token, so never taken for one).
    const bool by_certificate = absl::EqualsIgnoreCase(words[2], kCertificateWord);
    if (!by_certificate) t.token = std::string(words[2]);
    if (words.size() == 4) {
      if (t.role != Role::kWorker || !absl::StartsWith(words[3], "nodes=")) {
        return absl::InvalidArgumentError(absl::StrCat(
            where,
            ": a fourth word binds a worker's token to nodes (nodes=PATTERN[,PATTERN…]), "
            "not '",
            words[3], "'"));
      }
      for (absl::string_view pattern : absl::StrSplit(words[3].substr(6), ',')) {
        if (pattern.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": an empty node pattern in '", words[3], "'"));
        }
        t.nodes.emplace_back(pattern);
      }
    }
    if (by_certificate) {
      // Checked below for its name only.
    } else if (absl::Status s = CheckServerToken(t.token, where + ": the token"); !s.ok()) {
      return s;
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the client '", t.name, "' is named twice"));
    }
    if (!by_certificate && !tokens.insert(t.token).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": '", t.name, "' has a token another client has"));
    }
    out.push_back(std::move(t));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("the tokens file " + path +
                                      " names no client (lines of NAME ROLE TOKEN)");
  }
  return out;
}

}  // namespace quilt::rpc
