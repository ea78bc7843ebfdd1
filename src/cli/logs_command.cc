// quiltctl logs JOB: the end of the job's executor log on each of its
// nodes, fetched by the coordinator from their workers (GetJobLogs), as
// `tail` prints several files ("==> node (ranks …): path <==" before each),
// or as JSON. Exit status 1 when some node's log could not be had (each
// one's reason is printed in its place).
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/cli/command.h"
#include "src/cli/validators.h"
#include "src/rpc/coordinator_client.h"

namespace quilt::cli {
namespace {

struct LogsArgs {
  std::string id;
  int lines = 100;
  std::string node;
  std::string format = "text";
};

int PrintLogs(const LogsArgs& a, const GlobalOptions& globals) {
  rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
  absl::StatusOr<quilt::v1::GetJobLogsResponse> r = client.GetJobLogs(a.id, a.lines, a.node);
  if (!r.ok()) return PrintError(std::string(r.status().message()));
  bool missing = false;
  if (a.format == "json") {
    nlohmann::json j;
    j["job_id"] = a.id;
    j["nodes"] = nlohmann::json::array();
    for (const auto& n : r->nodes()) {
      j["nodes"].push_back({{"node", n.node()},
                            {"ranks", std::vector<int>(n.ranks().begin(), n.ranks().end())},
                            {"path", n.path()},
                            {"text", n.text()},
                            {"error", n.error()},
                            {"truncated", n.truncated()}});
      missing = missing || !n.error().empty();
    }
    std::cout << j.dump() << "\n";
    return missing ? 1 : 0;
  }
  for (int i = 0; i < r->nodes_size(); ++i) {
    const auto& n = r->nodes(i);
    std::string header = absl::StrCat(i > 0 ? "\n" : "", "==> ", n.node(),
                                      n.ranks_size() == 1 ? " (rank " : " (ranks ",
                                      absl::StrJoin(n.ranks(), ","), ")");
    if (!n.error().empty()) {
      std::cout << header << ": " << n.error() << " <==\n";
      missing = true;
      continue;
    }
    std::cout << header << ": " << n.path() << " <==\n" << n.text();
    if (!n.text().empty() && n.text().back() != '\n') std::cout << "\n";
  }
  return missing ? 1 : 0;
}

}  // namespace

void AddLogsCommand(CLI::App& app, const GlobalOptions& globals, std::vector<Command>* out) {
  auto a = std::make_shared<LogsArgs>();
  CLI::App* logs = app.add_subcommand(
      "logs", "The end of a job's executor log on each of its nodes (fetched from the workers)");
  logs->add_option("id", a->id, "Job id")->required()->check(Utf8Text());
  logs->add_option("-n,--lines", a->lines, "Last lines of each log (default 100; at most 10000)")
      ->check(CLI::Range(1, 10000));
  logs->add_option("--node", a->node, "Only this node's log")->check(Utf8Text());
  logs->add_option("-o,--output", a->format, "text | json")->check(CLI::IsMember({"text", "json"}));
  out->push_back({logs, [a, &globals] { return PrintLogs(*a, globals); }});
}

}  // namespace quilt::cli
