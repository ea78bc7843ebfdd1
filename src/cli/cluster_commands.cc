// quiltctl status / nodes: the coordinator's view of the cluster.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/cli/cluster_view.h"
#include "src/cli/command.h"
#include "src/cli/format.h"
#include "src/cli/validators.h"
#include "src/rpc/coordinator_client.h"

namespace quilt::cli {
namespace {

// Polls the cluster until no job runs on `node`, saying which still do as
// that changes; 1 when `timeout_s` (0 = none) passes first or the node is
// gone.
int WaitUntilIdle(rpc::AdminClient& admin, const std::string& node, double timeout_s) {
  const absl::Time until =
      timeout_s > 0 ? absl::Now() + absl::Seconds(timeout_s) : absl::InfiniteFuture();
  std::string said;
  for (;;) {
    auto s = admin.GetClusterStatus({});
    if (!s.ok()) return PrintError(std::string(s.status().message()));
    const quilt::v1::NodeStatus* found = FindNode(*s, node);
    if (found == nullptr) return PrintError("node " + node + " is no longer registered");
    if (found->running_jobs().empty()) {
      std::cout << "node " << node << " runs no job: it may be stopped" << std::endl;
      return 0;
    }
    const std::string jobs = absl::StrJoin(found->running_jobs(), ", ");
    if (absl::Now() >= until) {
      return PrintError(absl::StrCat("node ", node, " still runs ", jobs, " after ", timeout_s,
                                     " s (it stays draining)"));
    }
    if (jobs != said) {
      std::cout << "waiting for " << jobs << " to end on " << node << std::endl;
      said = jobs;
    }
    absl::SleepFor(absl::Seconds(1));
  }
}

}  // namespace

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
  forget->add_option("node", *forget_id, "Node id")->required()->check(Utf8Text());
  out->push_back({forget, [&g, forget_id]() {
                    rpc::AdminClient admin(g.coordinator, absl::Seconds(g.timeout_s));
                    absl::Status s = admin.ForgetNode(*forget_id);
                    if (!s.ok()) return PrintError(std::string(s.message()));
                    std::cout << "forgot node " << *forget_id << "\n";
                    return 0;
                  }});

  auto drain_id = std::make_shared<std::string>();
  auto wait = std::make_shared<bool>(false);
  auto wait_timeout_s = std::make_shared<double>(0);
  CLI::App* drain = app.add_subcommand(
      "drain",
      "Place no new jobs on a node (automatic restarts included); the jobs running on it go on");
  drain->add_option("node", *drain_id, "Node id")->required()->check(Utf8Text());
  drain->add_flag("--wait", *wait, "Wait until no job runs on the node (it may then be stopped)");
  drain
      ->add_option("--wait-timeout", *wait_timeout_s,
                   "With --wait: give up after this many seconds (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  out->push_back({drain, [&g, drain_id, wait, wait_timeout_s]() {
                    rpc::AdminClient admin(g.coordinator, absl::Seconds(g.timeout_s));
                    auto r = admin.SetNodeDraining(*drain_id, true);
                    if (!r.ok()) return PrintError(std::string(r.status().message()));
                    std::cout << "node " << *drain_id
                              << (r->changed() ? " is draining: no new jobs"
                                               : " was draining already");
                    if (r->running_jobs_size() > 0) {
                      std::cout << "; running on it until they end: "
                                << absl::StrJoin(r->running_jobs(), ", ");
                    }
                    std::cout << std::endl;
                    return *wait ? WaitUntilIdle(admin, *drain_id, *wait_timeout_s) : 0;
                  }});

  auto undrain_id = std::make_shared<std::string>();
  CLI::App* undrain =
      app.add_subcommand("undrain", "Take a drained node back: new jobs may run on it");
  undrain->add_option("node", *undrain_id, "Node id")->required()->check(Utf8Text());
  out->push_back({undrain, [&g, undrain_id]() {
                    rpc::AdminClient admin(g.coordinator, absl::Seconds(g.timeout_s));
                    auto r = admin.SetNodeDraining(*undrain_id, false);
                    if (!r.ok()) return PrintError(std::string(r.status().message()));
                    std::cout << "node " << *undrain_id
                              << (r->changed() ? " is taken back: new jobs may run on it"
                                               : " was not draining")
                              << "\n";
                    return 0;
                  }});
}

}  // namespace quilt::cli
