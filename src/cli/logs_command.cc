// quiltctl logs JOB: the end of the job's executor log on each of its
// nodes, fetched by the coordinator from their workers (GetJobLogs), as
// `tail` prints several files ("==> node (ranks …): path <==" before each),
// or as JSON. Exit status 1 when some node's log could not be had (each
// one's reason is printed in its place). With --run, the end of one run
// of the job's executor on each node only (the worker begins each run's
// lines with a numbered line of its own). With --follow, then the lines the nodes write, each
// prefixed by its node where there are several, until the job ends.
#include <iostream>
#include <map>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
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
  bool follow = false;
  int run = 0;  // 0: the log's end, whatever run wrote it
};

// After the first print: the lines each node writes from its offset on,
// until the job has ended and its last lines were read. 0, or 1 when the
// coordinator could not be asked.
int Follow(const LogsArgs& a, std::map<std::string, int64_t> offsets, rpc::JobClient& client) {
  const bool prefix = offsets.size() > 1;
  std::map<std::string, std::string> errors;  // the last said, per node
  for (bool ended = false; !ended;) {
    absl::SleepFor(absl::Seconds(1));
    absl::StatusOr<quilt::v1::JobStatus> job = client.GetJob(a.id);
    if (!job.ok()) return PrintError(std::string(job.status().message()));
    const quilt::v1::JobState s = job->state();
    ended = s == quilt::v1::JOB_STATE_SUCCEEDED || s == quilt::v1::JOB_STATE_FAILED ||
            s == quilt::v1::JOB_STATE_CANCELLED;
    absl::StatusOr<quilt::v1::GetJobLogsResponse> r =
        client.GetJobLogs(a.id, a.lines, a.node, offsets);
    if (!r.ok()) return PrintError(std::string(r.status().message()));
    for (const auto& n : r->nodes()) {
      if (!n.error().empty()) {
        if (errors[n.node()] != n.error()) std::cerr << n.node() << ": " << n.error() << "\n";
        errors[n.node()] = n.error();
        continue;
      }
      errors.erase(n.node());
      offsets[n.node()] = n.end_offset();
      if (!prefix) {
        std::cout << n.text();
        continue;
      }
      for (absl::string_view line : absl::StrSplit(n.text(), '\n', absl::SkipEmpty())) {
        std::cout << n.node() << " | " << line << "\n";
      }
    }
    std::cout << std::flush;
  }
  return 0;
}

int PrintLogs(const LogsArgs& a, const GlobalOptions& globals) {
  if (a.follow && a.format == "json") return PrintError("--follow prints text, not -o json");
  if (a.follow && a.run > 0) {
    return PrintError("--follow goes on from the log's end: give it no --run, or --run -1");
  }
  rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
  absl::StatusOr<quilt::v1::GetJobLogsResponse> r =
      client.GetJobLogs(a.id, a.lines, a.node, {}, a.run);
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
      if (a.run != 0) {
        j["nodes"].back()["run"] = n.run();
        j["nodes"].back()["runs"] = n.runs();
      }
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
    std::cout << header << ": " << n.path()
              << (a.run != 0 ? absl::StrCat(", run ", n.run(), " of ", n.runs()) : "") << " <==\n"
              << n.text();
    if (!n.text().empty() && n.text().back() != '\n') std::cout << "\n";
  }
  if (a.follow) {
    std::map<std::string, int64_t> offsets;
    for (const auto& n : r->nodes()) {
      if (n.error().empty()) offsets[n.node()] = n.end_offset();
    }
    if (offsets.empty()) return 1;
    std::cout << std::flush;
    return Follow(a, std::move(offsets), client);
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
  logs->add_option("--run", a->run,
                   "Only the end of this run of the job's executor on each node (1 the first, -1 "
                   "the last; the worker begins each run with a numbered line)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            int n = 0;
            if (!absl::SimpleAtoi(v, &n) || n == 0 || n < -1) {
              return "--run takes 1 or more (the first run is 1), or -1 for the last, not " + v;
            }
            return "";
          },
          "RUN"));
  logs->add_flag("-f,--follow", a->follow,
                 "Then print the lines the nodes write until the job ends (text output)");
  out->push_back({logs, [a, &globals] { return PrintLogs(*a, globals); }});
}

}  // namespace quilt::cli
