// quiltctl: the admin CLI. Talks to the coordinator's AdminService; `-o json`
// on every listing; exit code 1 (with the address tried) when the
// coordinator cannot be reached, 2 for usage errors.
#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "src/cli/cluster_view.h"
#include "src/cli/format.h"
#include "src/common/version.h"
#include "src/rpc/coordinator_client.h"

namespace {

std::string DefaultCoordinator() {
  const char* env = std::getenv("QUILT_COORDINATOR");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
}

int Error(const absl::Status& s) {
  std::cerr << "quiltctl: " << s.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"quiltctl: administer a Quilt cluster"};
  app.set_version_flag("--version", quilt::kVersion);
  app.require_subcommand(1);
  std::string coordinator = DefaultCoordinator();
  double timeout_s = 10;
  app.add_option("--coordinator", coordinator,
                 "Coordinator address (default $QUILT_COORDINATOR or 127.0.0.1:7070)");
  app.add_option("--timeout", timeout_s, "Deadline of each call, in seconds")
      ->check(CLI::PositiveNumber);

  std::string status_format = "table";
  CLI::App* status_cmd = app.add_subcommand("status",
                                            "Cluster summary: nodes, devices, jobs, "
                                            "recent failures");
  status_cmd->add_option("-o,--output", status_format, "table | json")
      ->check(CLI::IsMember({"table", "json"}));

  std::string nodes_format = "table";
  CLI::App* nodes_cmd = app.add_subcommand("nodes", "List nodes with state, devices and speed");
  nodes_cmd->add_option("-o,--output", nodes_format, "table | wide | json")
      ->check(CLI::IsMember({"table", "wide", "json"}));

  CLI11_PARSE(app, argc, argv);

  quilt::rpc::AdminClient admin(coordinator, absl::Seconds(timeout_s));
  quilt::v1::GetClusterStatusRequest request;
  absl::StatusOr<quilt::v1::ClusterStatus> status = admin.GetClusterStatus(request);
  if (!status.ok()) return Error(status.status());
  if (*status_cmd) {
    std::cout << (status_format == "json"
                      ? quilt::cli::ToJson(*status)
                      : quilt::cli::RenderStatus(*status, coordinator, absl::Now()));
  } else if (*nodes_cmd) {
    std::cout << quilt::cli::RenderNodes(*status, nodes_format);
  }
  return 0;
}
