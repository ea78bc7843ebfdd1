// quilt-executor: runs one process's share of a DistributedProgram for K
// steps. Each process of a job gets the same program, its rank and the
// world (the node each rank runs); they find each other through a
// rendezvous directory or the coordinator (coordinator://HOST:PORT/JOB).
// At the end it writes the persistent tensors its devices hold
// (parameters, optimizer state; shards on parameter servers) as .npy files
// and the per-step metrics as JSON; checkpoints write the same every N
// steps under DIR/step-NNNNNNNN/rank-R/ (metrics.json last, so a
// checkpoint with it is complete). --progress prints one JSON line per
// step on stdout ({"step", "loss_part", "step_time_s", "peak_bytes"}).
//
//   quilt-executor --program prog.pb --world n0,n1 --rank 0 --rendezvous DIR
//       --steps 10 --data synthetic|X.npy,Y.npy --out DIR [--trace t.json]
//       [--slowdown n0/cpu:0=3] [--step-timeout 60] [--seed 0]
//       [--checkpoint-dir DIR --checkpoint-every N] [--progress] [--cpus 0-3]
//       [--restore STEP_DIR --restore-world W] [--steps-before K]
//       [--tls-ca CA.pem [--token-file F] [--tls-server-name N]
//        [--tls-cert C.pem --tls-key K.pem]]
//
// Exit status: 0 success, 1 failure (the reason on stderr), 2 usage.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "src/common/config_cli.h"
#include "src/common/cpu_affinity.h"
#include "src/common/crash_report.h"
#include "src/common/files.h"
#include "src/common/status.h"
#include "src/graph/graph.h"
#include "src/graph/validate.h"
#include "src/rpc/coordinator_client.h"
#include "src/rpc/security.h"
#include "src/runtime/checkpoint.h"
#include "src/runtime/comm/rendezvous.h"
#include "src/runtime/comm/ucx_transport.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/npy.h"
#include "src/runtime/executor.h"
#include "src/runtime/parallel.h"
#include "src/sim/simulator.h"

namespace {

int Fail(const std::string& message) {
  std::cerr << "quilt-executor: " << message << "\n";
  return 1;
}

// A line of the run's progress in the log (stderr): "info TIME message"
// (the worker's failure reason skips such lines; `quiltctl logs` shows
// them).
// One write, so that no other writer's output lands inside the line.
void Info(const std::string& message) {
  const std::string line = absl::StrCat(
      "info ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()), " ",
      message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::string FileName(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  return out;
}

// The tensors this process holds, into `dir`, and with `steps` every
// step's loss part and times so far (the run's final state; a checkpoint
// leaves them out: they would make each one larger than the last).
absl::Status WriteState(const std::string& dir, int rank, const quilt::Executor& executor,
                        bool steps) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError("cannot create " + dir + ": " + ec.message());
  nlohmann::json metrics;
  metrics["rank"] = rank;
  metrics["tensors"] = nlohmann::json::array();
  metrics["loss_parts"] = nlohmann::json::array();
  metrics["step_times_s"] = nlohmann::json::array();
  metrics["compute_times_s"] = nlohmann::json::array();
  metrics["peak_bytes"] = nlohmann::json::array();
  if (steps) {
    for (const quilt::ExecutorStep& s : executor.steps()) {
      metrics["loss_parts"].push_back(s.has_loss ? nlohmann::json(s.loss_part)
                                                 : nlohmann::json(nullptr));
      metrics["step_times_s"].push_back(s.step_time_s);
      metrics["compute_times_s"].push_back(s.compute_time_s);
      metrics["peak_bytes"].push_back(s.peak_bytes);
    }
  }
  for (const quilt::HeldTensor& h : executor.Persistent()) {
    const std::string file =
        FileName(absl::StrCat(h.device, "__", h.tensor, "__", h.begin, "_", h.end)) + ".npy";
    RETURN_IF_ERROR(quilt::WriteNpy(dir + "/" + file, h.value));
    metrics["tensors"].push_back({{"device", h.device},
                                  {"tensor", h.tensor},
                                  {"begin", h.begin},
                                  {"end", h.end},
                                  {"file", file}});
  }
  return quilt::WriteFileAtomically(dir + "/metrics.json", metrics.dump(1));
}

}  // namespace

int main(int argc, char** argv) {
  quilt::InstallCrashReport(argv[0]);
  CLI::App app{"quilt-executor: run a process's share of a DistributedProgram"};
  std::string program_path, world, rendezvous, data_spec = "synthetic", out_dir, trace_path,
                                               slowdown;
  int rank = 0;
  int64_t steps = 1;
  uint64_t seed = 0;
  double step_timeout = 120, connect_timeout = 60;
  int threads = 1;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool progress = false;
  std::string cpus;
  app.add_option("--program", program_path, "DistributedProgram (binary protobuf)")->required();
  app.add_option("--world", world, "Nodes by rank, comma-separated")->required();
  app.add_option("--rank", rank, "This process's rank")->required();
  app.add_option("--rendezvous", rendezvous, "Directory shared by the job's processes")->required();
  app.add_option("--steps", steps, "Training steps")->check(CLI::PositiveNumber);
  app.add_option("--data", data_spec, "synthetic, or INPUTS.npy,LABELS.npy");
  app.add_option("--seed", seed, "Seed of the synthetic data and of random kernels");
  app.add_option("--out", out_dir, "Directory for the final tensors and metrics.json");
  app.add_option("--trace", trace_path, "Measured timeline (Chrome trace JSON)");
  app.add_option("--slowdown", slowdown, "Emulated slower devices: DEVICE=FACTOR,...");
  app.add_option("--step-timeout", step_timeout, "Seconds a step may take")
      ->check(CLI::PositiveNumber);
  app.add_option("--connect-timeout", connect_timeout, "Seconds to wait for the other processes");
  app.add_option("--threads", threads, "Kernel threads (at most 1024)")->check(CLI::Range(1, 1024));
  app.add_option("--checkpoint-dir", checkpoint_dir, "Directory of the job's checkpoints");
  app.add_option("--checkpoint-every", checkpoint_every,
                 "Checkpoint every N steps (0: only after the last)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--progress", progress, "One JSON line per step on stdout");
  std::string restore_dir;
  int restore_world = 0;
  int64_t steps_before = 0;
  app.add_option("--restore", restore_dir,
                 "A checkpoint's step directory to start from (parameters, optimizer state)");
  app.add_option("--restore-world", restore_world, "The ranks that wrote that checkpoint")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps-before", steps_before,
                 "Steps trained before this run (the data's position, Adam's step count)")
      ->check(CLI::NonNegativeNumber);
  bool timing_only = false;
  app.add_flag("--timing-only", timing_only,
               "Compute every step's updates without applying them (profiling runs)");
  app.add_option("--cpus", cpus, "Run on these CPUs only (a list like 0,2-3)");
  std::string tls_ca, token_file, tls_server_name, tls_cert, tls_key;
  app.add_option("--tls-ca", tls_ca, "PEM CA to trust the coordinator by (coordinator:// TLS)");
  app.add_option("--token-file", token_file, "The coordinator's client token (needs --tls-ca)");
  app.add_option("--tls-server-name", tls_server_name,
                 "The name the coordinator's certificate carries");
  app.add_option("--tls-cert", tls_cert, "PEM client certificate (mutual TLS; needs --tls-ca)");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  if (std::optional<int> code = quilt::ParseCommandLine(app, argc, argv)) return *code;

  absl::StatusOr<quilt::rpc::ClientSecurity> security =
      quilt::rpc::LoadClientSecurity(tls_ca, token_file, tls_server_name, tls_cert, tls_key);
  if (!security.ok()) return Fail(std::string(security.status().message()));
  quilt::rpc::SetClientSecurity(*security);
  // Pinned before any thread starts (they would inherit it anyway).
  if (!cpus.empty()) {
    absl::StatusOr<std::vector<int>> pinned = quilt::PinProcessToCpuList(cpus);
    if (!pinned.ok()) return Fail("--cpus: " + std::string(pinned.status().message()));
  }
  quilt::SetComputeThreads(threads);
  // Checkpoints are written after steps, the last after the whole run: a
  // directory this node cannot write in fails the job now, not then.
  if (!checkpoint_dir.empty()) {
    if (absl::Status w = quilt::MakeWritableDir(checkpoint_dir); !w.ok()) {
      return Fail(absl::StrCat("cannot write checkpoints in ", checkpoint_dir, ": ", w.message()));
    }
  }
  absl::StatusOr<std::string> bytes = quilt::ReadFile(program_path);
  if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
  quilt::v1::DistributedProgram program;
  if (!program.ParseFromString(*bytes)) return Fail(program_path + " is not a DistributedProgram");
  std::string().swap(*bytes);  // not held through the run beside the parsed program
  const std::vector<std::string> nodes = absl::StrSplit(world, ',');
  if (rank < 0 || rank >= static_cast<int>(nodes.size())) {
    return Fail(absl::StrCat("--rank ", rank, " is outside the world of ", nodes.size()));
  }
  quilt::ExecutorOptions options;
  options.timing_only = timing_only;
  options.steps_before = steps_before;
  if (!restore_dir.empty()) {
    if (restore_world <= 0) return Fail("--restore needs --restore-world");
    options.restore = [&](const std::set<std::string>& names)
        -> absl::StatusOr<std::map<std::string, quilt::Tensor>> {
      absl::StatusOr<quilt::Checkpoint> c =
          quilt::ReadCheckpoint(restore_dir, restore_world,
                                [&names](const std::string& n) { return names.count(n) > 0; });
      if (!c.ok()) {
        return absl::Status(c.status().code(), absl::StrCat("cannot restore from ", restore_dir,
                                                            ": ", c.status().message()));
      }
      return std::move(c->tensors);
    };
  }
  options.steps = steps;
  options.seed = seed;
  options.step_timeout = absl::Seconds(step_timeout);
  options.trace = !trace_path.empty();
  for (absl::string_view item : absl::StrSplit(slowdown, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, '=');
    double f = 0;
    if (!absl::SimpleAtod(kv.second, &f) || f < 1)
      return Fail("bad --slowdown entry '" + std::string(item) + "'");
    options.slowdown[kv.first] = f;
  }
  quilt::Executor* running = nullptr;  // set once created
  absl::Time last_info = absl::Now();
  options.on_step = [&](const quilt::ExecutorStep& s) -> absl::Status {
    // In the log: a step every 30 s, and the last.
    if (progress && (s.step == steps || absl::Now() - last_info >= absl::Seconds(30))) {
      last_info = absl::Now();
      Info(absl::StrFormat("step %d/%d: %.3f ms%s", steps_before + s.step, steps_before + steps,
                           s.step_time_s * 1e3,
                           s.has_loss ? absl::StrFormat(", loss part %.6g", s.loss_part) : ""));
    }
    if (progress) {
      nlohmann::json line = {
          {"step", s.step}, {"step_time_s", s.step_time_s}, {"peak_bytes", s.peak_bytes}};
      line["loss_part"] = s.has_loss ? nlohmann::json(s.loss_part) : nlohmann::json(nullptr);
      std::cout << line.dump() << std::endl;
    } else {
      std::cerr << "rank " << rank << " step " << s.step << " loss part " << s.loss_part << " ("
                << s.step_time_s * 1e3 << " ms)\n";
    }
    const bool due = !checkpoint_dir.empty() &&
                     (s.step == steps || (checkpoint_every > 0 && s.step % checkpoint_every == 0));
    if (!due || running == nullptr) return absl::OkStatus();
    // A checkpoint that cannot be written ends the job now: the steps
    // after it could not be kept either.
    const std::string dir = absl::StrFormat("%s/step-%08d/rank-%d", checkpoint_dir, s.step, rank);
    absl::Status w = WriteState(dir, rank, *running, /*steps=*/false);
    if (w.ok()) {
      Info(absl::StrCat("checkpoint of step ", steps_before + s.step, " written to ", dir));
      return w;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // no partial checkpoint left behind
    return absl::Status(w.code(), absl::StrCat("checkpoint at step ", s.step, ": ", w.message()));
  };
  // Data.
  // (The data source reads the graph's inputs and shapes, not its weights.)
  absl::StatusOr<quilt::Graph> graph =
      quilt::Graph::FromProto(program.graph(), quilt::Graph::Read::kStructure);
  if (!graph.ok()) return Fail(std::string(graph.status().message()));
  // The data source trusts the graph's shapes as the kernels do.
  if (absl::Status v = quilt::ValidateGraph(&*graph); !v.ok()) {
    return Fail(absl::StrCat("the program's graph: ", v.message()));
  }
  std::unique_ptr<quilt::Dataset> data;
  absl::StatusOr<quilt::DataSignature> sig = quilt::DataSignatureOf(*graph);
  if (sig.ok()) {
    absl::StatusOr<std::unique_ptr<quilt::Dataset>> d = absl::InternalError("");
    if (data_spec == "synthetic") {
      d = quilt::MakeSyntheticDataset(*graph, *sig, seed);
    } else {
      d = quilt::OpenNumpyFiles(data_spec, *sig);
    }
    if (!d.ok()) return Fail(std::string(d.status().message()));
    data = std::move(*d);
  }
  *graph = quilt::Graph();
  std::unique_ptr<quilt::Rendezvous> rdv;
  if (absl::StartsWith(rendezvous, "coordinator://")) {
    const std::string rest = rendezvous.substr(strlen("coordinator://"));
    const size_t slash = rest.rfind('/');
    if (slash == std::string::npos || slash + 1 == rest.size()) {
      return Fail("--rendezvous coordinator://HOST:PORT/JOB needs a job id");
    }
    rdv = std::make_unique<quilt::rpc::CoordinatorRendezvous>(rest.substr(0, slash),
                                                              rest.substr(slash + 1));
  } else {
    rdv = std::make_unique<quilt::DirectoryRendezvous>(rendezvous);
  }
  Info(absl::StrCat("rank ", rank, " of ", nodes.size(), " on ", nodes[rank], ": ", steps, " steps",
                    steps_before > 0 ? absl::StrCat(" after step ", steps_before) : "", ", data ",
                    data_spec, restore_dir.empty() ? "" : ", restored from " + restore_dir));
  const absl::Time connecting = absl::Now();
  absl::StatusOr<std::unique_ptr<quilt::Transport>> transport = quilt::CreateUcxTransport(
      rank, static_cast<int>(nodes.size()), rdv.get(), absl::Seconds(connect_timeout), nodes);
  if (!transport.ok()) return Fail(std::string(transport.status().message()));
  // Everyone connected before the first step.
  if (absl::Status b =
          quilt::Barrier(transport->get(), 1, absl::Now() + absl::Seconds(connect_timeout));
      !b.ok()) {
    return Fail(std::string(b.message()));
  }
  if (nodes.size() > 1) {
    Info(absl::StrFormat("connected to %d other rank%s in %.2f s", nodes.size() - 1,
                         nodes.size() > 2 ? "s" : "",
                         absl::ToDoubleSeconds(absl::Now() - connecting)));
  }
  const absl::Time began = absl::Now();
  absl::StatusOr<std::unique_ptr<quilt::Executor>> executor = quilt::Executor::Create(
      std::move(program), nodes, rank, transport->get(), data.get(), options);
  if (!executor.ok()) return Fail(std::string(executor.status().message()));
  running = executor->get();
  const absl::Status run = (*executor)->Run();
  if (!trace_path.empty()) {
    std::ofstream(trace_path) << quilt::ChromeTraceJson((*executor)->Trace(),
                                                        (*executor)->TraceLanes(),
                                                        absl::StrCat("rank ", rank, " (measured)"));
  }
  if (!run.ok()) {
    // Transfers a failed step left posted (sends UCX cannot cancel, the
    // next hops of a collective) call back into the executor when the
    // transport ends them: it ends first, the executor still there but its
    // threads (which use the transport) stopped.
    (*executor)->Stop();
    transport->reset();
    return Fail(std::string(run.message()));
  }
  if (!out_dir.empty()) {
    absl::Status w = WriteState(out_dir, rank, **executor, /*steps=*/true);
    if (!w.ok()) return Fail(std::string(w.message()));
  }
  // Nobody leaves (closing its connections) while others still run.
  if (absl::Status b = quilt::Barrier(transport->get(), 2, absl::Now() + options.step_timeout);
      !b.ok()) {
    return Fail(std::string(b.message()));
  }
  Info(absl::StrFormat("finished %d steps in %.2f s", steps,
                       absl::ToDoubleSeconds(absl::Now() - began)));
  return 0;
}
