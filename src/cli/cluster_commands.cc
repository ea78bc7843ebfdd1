// quiltctl status / nodes: the coordinator's view of the cluster.
#include <iostream>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/cli/cluster_view.h"
#include "src/cli/command.h"
#include "src/cli/format.h"
#include "src/rpc/coordinator_client.h"

namespace quilt::cli {

int PrintError(const std::string& message) {
  std::cerr << "quiltctl: " << message << "\n";
  return 1;
}

void AddClusterCommands(CLI::App& app, const GlobalOptions& g, std::vector<Command>* out) {
  auto status_format = std::make_shared<std::string>("table");
  CLI::App* status =
      app.add_subcommand("status", "Cluster summary: nodes, devices, jobs, recent failures");
  status->add_option("-o,--output", *status_format, "table | json")
      ->check(CLI::IsMember({"table", "json"}));
  out->push_back({status, [&g, status_format]() {
                    rpc::AdminClient admin(g.coordinator, absl::Seconds(g.timeout_s));
                    auto s = admin.GetClusterStatus({});
                    if (!s.ok()) return PrintError(std::string(s.status().message()));
                    std::cout << (*status_format == "json"
                                      ? ToJson(*s)
                                      : RenderStatus(*s, g.coordinator, absl::Now()));
                    return 0;
                  }});

  auto nodes_format = std::make_shared<std::string>("table");
  CLI::App* nodes = app.add_subcommand("nodes", "List nodes with state, devices and speed");
  nodes->add_option("-o,--output", *nodes_format, "table | wide | json")
      ->check(CLI::IsMember({"table", "wide", "json"}));
  out->push_back({nodes, [&g, nodes_format]() {
                    rpc::AdminClient admin(g.coordinator, absl::Seconds(g.timeout_s));
                    auto s = admin.GetClusterStatus({});
                    if (!s.ok()) return PrintError(std::string(s.status().message()));
                    std::cout << RenderNodes(*s, *nodes_format);
                    return 0;
                  }});

  auto forget_id = std::make_shared<std::string>();
  CLI::App* forget =
      app.add_subcommand("forget", "Remove a Down node (a machine taken out of the cluster)");
  forget->add_option("node", *forget_id, "Node id")->required();
  out->push_back({forget, [&g, forget_id]() {
                    rpc::AdminClient admin(g.coordinator, absl::Seconds(g.timeout_s));
                    absl::Status s = admin.ForgetNode(*forget_id);
                    if (!s.ok()) return PrintError(std::string(s.message()));
                    std::cout << "forgot node " << *forget_id << "\n";
                    return 0;
                  }});

  for (const bool draining : {true, false}) {
    auto id = std::make_shared<std::string>();
    CLI::App* cmd = draining ? app.add_subcommand("drain",
                                                  "Place no new jobs on a node (automatic restarts "
                                                  "included); the jobs running on it go on")
                             : app.add_subcommand(
                                   "undrain", "Take a drained node back: new jobs may run on it");
    cmd->add_option("node", *id, "Node id")->required();
    out->push_back({cmd, [&g, id, draining]() {
                      rpc::AdminClient admin(g.coordinator, absl::Seconds(g.timeout_s));
                      auto r = admin.SetNodeDraining(*id, draining);
                      if (!r.ok()) return PrintError(std::string(r.status().message()));
                      std::cout << "node " << *id
                                << (draining
                                        ? (r->changed() ? " is draining: no new jobs"
                                                        : " was draining already")
                                        : (r->changed() ? " is taken back: new jobs may run on it"
                                                        : " was not draining"));
                      if (draining && r->running_jobs_size() > 0) {
                        std::cout << "; running on it until they end: "
                                  << absl::StrJoin(r->running_jobs(), ", ");
                      }
                      std::cout << "\n";
                      return 0;
                    }});
  }
}

}  // namespace quilt::cli
