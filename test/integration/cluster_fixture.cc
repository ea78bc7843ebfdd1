#include "test/integration/cluster_fixture.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/common/status.h"

namespace quilt::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits until `path` exists and is non-empty; returns its first line.
absl::StatusOr<std::string> WaitForFile(const std::string& path, absl::Duration timeout) {
  std::string line;
  bool ok = Eventually(
      [&] {
        std::ifstream in(path);
        return std::getline(in, line) && !line.empty();
      },
      timeout);
  if (!ok) return absl::DeadlineExceededError("timed out waiting for " + path);
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

bool Eventually(const std::function<bool()>& cond, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return cond();
}

LocalCluster::LocalCluster() = default;
LocalCluster::~LocalCluster() = default;

std::string LocalCluster::Log(const std::string& name) const {
  return Slurp(dir_.File(name + ".log"));
}

absl::StatusOr<std::string> LocalCluster::WaitReady(const std::string& ready_file,
                                                    absl::Duration timeout,
                                                    const std::string& name) const {
  absl::StatusOr<std::string> line = WaitForFile(ready_file, timeout);
  if (line.ok()) return line;
  // A daemon that did not start says why in its log.
  return absl::Status(line.status().code(),
                      absl::StrCat(line.status().message(), "; its log:\n", Log(name)));
}

absl::StatusOr<std::string> LocalCluster::StartCoordinator(
    const std::string& address, const std::vector<std::string>& extra_flags) {
  const std::string ready = dir_.File(absl::StrCat("coordinator.ready.", restarts_++));
  std::vector<std::string> argv = {RunfilePath("src/coordinator/quilt-coordinator"),
                                   "--listen_address",
                                   address,
                                   "--state_dir",
                                   dir_.File("state"),
                                   "--ready_file",
                                   ready,
                                   "--heartbeat_period_ms",
                                   absl::StrCat(absl::ToInt64Milliseconds(kHeartbeatPeriod)),
                                   "--not_ready_after_ms",
                                   absl::StrCat(absl::ToInt64Milliseconds(kNotReadyAfter)),
                                   "--down_after_ms",
                                   absl::StrCat(absl::ToInt64Milliseconds(kDownAfter)),
                                   "--drain_timeout_ms",
                                   "1000"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  auto p = Subprocess::Start(argv, dir_.File("coordinator.log"));
  if (!p.ok()) return p.status();
  coordinator_ = std::make_unique<Subprocess>(std::move(*p));
  ASSIGN_OR_RETURN(address_, WaitReady(ready, absl::Seconds(20), "coordinator"));
  return address_;
}

void LocalCluster::StopCoordinator(int sig) {
  if (coordinator_) coordinator_->Signal(sig);
}

std::optional<int> LocalCluster::WaitCoordinator(absl::Duration timeout) {
  return coordinator_ ? coordinator_->Wait(timeout) : std::nullopt;
}

absl::StatusOr<std::string> LocalCluster::StartWorker(const std::string& node_id,
                                                      const std::vector<std::string>& extra,
                                                      absl::Duration ready_within) {
  const std::string ready = dir_.File(absl::StrCat(node_id, ".ready.", restarts_++));
  std::vector<std::string> argv = {RunfilePath("src/worker/quilt-worker"), "--coordinator_address",
                                   address_, "--node_id", node_id, "--cpu_cores", "1",
                                   "--calibration_ms", "100", "--cuda", "false", "--max_backoff_ms",
                                   "300", "--ready_file", ready,
                                   // Its own (the default under /tmp is
                                   // the same for tests run at once).
                                   "--work_dir", dir_.File(node_id + "-work")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = Subprocess::Start(argv, dir_.File(node_id + ".log"));
  if (!p.ok()) return p.status();
  workers_[node_id] = std::make_unique<Subprocess>(std::move(*p));
  ASSIGN_OR_RETURN(std::string line, WaitReady(ready, ready_within, node_id));
  // "<node_id> <incarnation>"
  return line.substr(line.find(' ') + 1);
}

void LocalCluster::KillWorker(const std::string& node_id, int sig) {
  auto it = workers_.find(node_id);
  if (it == workers_.end()) return;
  it->second->Signal(sig);
  it->second->Wait(absl::Seconds(10));
  workers_.erase(it);
}

absl::StatusOr<CommandResult> LocalCluster::Quiltctl(const std::vector<std::string>& args) {
  // A live plan profiles the model on the workers first: seconds on a
  // loaded machine.
  std::vector<std::string> argv = {RunfilePath("src/cli/quiltctl"), "--coordinator", address_,
                                   "--timeout", "30"};
  argv.insert(argv.end(), client_flags_.begin(), client_flags_.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

absl::StatusOr<std::map<std::string, nlohmann::json>> LocalCluster::Nodes() {
  absl::StatusOr<CommandResult> r = Quiltctl({"nodes", "-o", "json"});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("quiltctl nodes failed: ", r->err));
  }
  nlohmann::json doc = nlohmann::json::parse(r->out, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("nodes")) {
    return absl::InternalError("quiltctl nodes -o json printed invalid JSON: " + r->out);
  }
  std::map<std::string, nlohmann::json> nodes;
  for (const auto& n : doc["nodes"]) nodes[n["info"]["node_id"].get<std::string>()] = n;
  return nodes;
}

}  // namespace quilt::testing
