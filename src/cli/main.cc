// quiltctl: the admin CLI. Cluster commands talk to the coordinator (exit
// code 1 with the address tried when it cannot be reached); graph and
// train-local work offline. `-o json` on every listing; 2 for usage errors.
#include <cblas-openblas.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "CLI/CLI.hpp"
#include "src/cli/command.h"
#include "src/cli/validators.h"
#include "src/common/net.h"
#include "src/common/version.h"
#include "src/rpc/security.h"

int main(int argc, char** argv) {
  // The planner's linear programs call BLAS on tiny matrices; OpenBLAS's
  // worker threads would then spin on the cores the search runs on.
  // train-local sizes its own kernel threads (and keeps OpenBLAS at one).
  openblas_set_num_threads(1);
  CLI::App app{"quiltctl: administer a Quilt cluster and look at models"};
  app.set_version_flag("--version", quilt::kVersion);
  app.require_subcommand(1);
  quilt::cli::GlobalOptions globals;
  const char* env = std::getenv("QUILT_COORDINATOR");
  globals.coordinator = env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
  CLI::Option* coordinator =
      app.add_option("--coordinator", globals.coordinator,
                     "Coordinator address (default $QUILT_COORDINATOR or 127.0.0.1:7070)");
  // TLS to the coordinator and its client token (flags, else environment).
  auto from_env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  std::string tls_ca = from_env("QUILT_TLS_CA"), token_file = from_env("QUILT_TOKEN_FILE"),
              tls_server_name = from_env("QUILT_TLS_SERVER_NAME"),
              tls_cert = from_env("QUILT_TLS_CERT"), tls_key = from_env("QUILT_TLS_KEY");
  app.add_option("--tls-ca", tls_ca,
                 "PEM CA to trust the coordinator by: talk TLS (default $QUILT_TLS_CA)");
  app.add_option("--token-file", token_file,
                 "File holding the coordinator's client token (default $QUILT_TOKEN_FILE)");
  app.add_option("--tls-server-name", tls_server_name,
                 "The name the coordinator's certificate carries, when it is not the address's "
                 "host (default $QUILT_TLS_SERVER_NAME)");
  app.add_option("--tls-cert", tls_cert,
                 "PEM client certificate, for a coordinator that asks for one (default "
                 "$QUILT_TLS_CERT)");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert (default $QUILT_TLS_KEY)");
  CLI::Option* timeout =
      app.add_option("--timeout", globals.timeout_s,
                     "Deadline of each call, in seconds (default 10; 600 for plan)")
          ->check(quilt::cli::Positive());
  std::vector<quilt::cli::Command> commands;
  quilt::cli::AddClusterCommands(app, globals, &commands);
  quilt::cli::AddGraphCommands(app, &commands);
  quilt::cli::AddTrainLocalCommand(app, &commands);
  quilt::cli::AddPlanCommand(app, globals, &commands);
  quilt::cli::AddSimulateCommand(app, &commands);
  quilt::cli::AddJobCommands(app, globals, &commands);
  quilt::cli::AddLogsCommand(app, globals, &commands);
  // The command: the first argument that is not an option (nor the value
  // of a global one). CLI11 would only say that one is required.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--coordinator" || arg == "--timeout" || arg == "--tls-ca" ||
        arg == "--token-file" || arg == "--tls-server-name" || arg == "--tls-cert" ||
        arg == "--tls-key") {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] == '-') continue;
    // The command, and the word right after it for a command that takes
    // one (describe job).
    std::string path;
    CLI::App* at = &app;
    for (int k = i; k < argc && at != nullptr; ++k) {
      const std::string word = argv[k];
      if (k > i && (at->get_require_subcommand_min() == 0 || word.empty() || word[0] == '-')) {
        break;
      }
      CLI::App* found = nullptr;
      std::vector<std::string> names;
      for (CLI::App* sub : at->get_subcommands({})) {
        names.push_back(sub->get_name());
        if (sub->get_name() == word) found = sub;
      }
      path += (path.empty() ? "" : " ") + word;
      if (found == nullptr) {
        std::cerr << "quiltctl: unknown command '" << path << "' (commands"
                  << (at == &app ? "" : " of " + at->get_name()) << ": ";
        for (size_t n = 0; n < names.size(); ++n) std::cerr << (n ? ", " : "") << names[n];
        std::cerr << "; quiltctl --help)\n";
        return 2;
      }
      at = found;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  globals.timeout_set = timeout->count() > 0;
  absl::StatusOr<quilt::rpc::ClientSecurity> security =
      quilt::rpc::LoadClientSecurity(tls_ca, token_file, tls_server_name, tls_cert, tls_key);
  if (!security.ok()) {
    std::cerr << "quiltctl: " << security.status().message() << "\n";
    return 2;
  }
  quilt::rpc::SetClientSecurity(*security);
  for (const quilt::cli::Command& c : commands) {
    if (!c.app->parsed()) continue;
    // Commands that call the coordinator need an address they can use.
    static const std::set<std::string> remote = {"status", "nodes",  "submit", "jobs",   "describe",
                                                 "watch",  "cancel", "export", "delete", "forget",
                                                 "resume", "losses", "logs"};
    if (remote.count(c.app->get_name()) > 0 && globals.coordinator.rfind("unix:", 0) != 0) {
      absl::StatusOr<quilt::HostPort> hp = quilt::ParseHostPort(globals.coordinator);
      if (!hp.ok() || hp->port == 0) {
        std::cerr << "quiltctl: "
                  << (coordinator->count() > 0 || env == nullptr || *env == '\0'
                          ? "--coordinator "
                          : "$QUILT_COORDINATOR ")
                  << (hp.ok() ? "'" + globals.coordinator + "': port 0 is no coordinator's port"
                              : std::string(hp.status().message()))
                  << "\n";
        return 2;
      }
      if (tls_ca.empty() && !quilt::IsLoopbackAddress(globals.coordinator)) {
        std::cerr << "quiltctl: " << globals.coordinator
                  << " is not a loopback address: a coordinator there serves TLS; pass --tls-ca "
                     "(and --token-file) or set $QUILT_TLS_CA ($QUILT_TOKEN_FILE)\n";
        return 2;
      }
    }
    return c.run();
  }
  return 2;
}
