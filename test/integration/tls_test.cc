// The API over TLS with a client token, end to end with the real binaries:
// a coordinator serving TLS and asking for a token, workers and their
// executors that trust its CA and send the token (a job runs to
// SUCCEEDED), and quiltctl refused for each thing it lacks: TLS, trust in
// the server's CA, the right server name, the token; named tokens whose
// roles set what each client may call; client certificates (mutual TLS),
// alone and beside tokens.
#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "test/integration/cluster_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;

std::string Tls(const std::string& file) { return RunfilePath("test/fixtures/tls/" + file); }

std::vector<std::string> Flags(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A coordinator's flags to serve TLS with the test certificate and ask for
// the tokens of `flag` (--token_file or --tokens_file) `file`.
std::vector<std::string> ServingTls(const std::string& flag, const std::string& file) {
  return {"--tls_cert_file", Tls("server.pem"), "--tls_key_file", Tls("server.key"), flag,
          Tls(file)};
}

// A worker's flags to trust the test CA and send the token in `file`.
std::vector<std::string> Trusting(const std::string& file) {
  return {"--tls_ca_file", Tls("ca.pem"), "--token_file", Tls(file)};
}

// quiltctl against `cluster` with `flags` before `args` (an empty result,
// and a failure of the test, where it could not run).
CommandResult Client(LocalCluster& cluster, const std::vector<std::string>& flags,
                     const std::vector<std::string>& args) {
  absl::StatusOr<CommandResult> r = cluster.Quiltctl(Flags(flags, args));
  EXPECT_THAT(r.status(), IsOk());
  return r.ok() ? *r : CommandResult{};
}

// quiltctl's flags to trust the test CA and present alice's certificate.
std::vector<std::string> AliceCertificate() {
  return {"--tls-ca", Tls("ca.pem"), "--tls-cert", Tls("alice.pem"), "--tls-key", Tls("alice.key")};
}

// A worker's flags to trust the test CA and present worker.pem (worker-a's).
std::vector<std::string> WorkerCertificate() {
  return {"--tls_ca_file",   Tls("ca.pem"),    "--tls_cert_file",
          Tls("worker.pem"), "--tls_key_file", Tls("worker.key")};
}

TEST(Tls, ACoordinatorOnTlsServesOnlyClientsThatTrustItAndSendItsToken) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator("127.0.0.1:0", ServingTls("--token_file", "token")), IsOk());
  EXPECT_THAT(cluster.Log("coordinator"), HasSubstr("transport=tls+token"));
  const std::vector<std::string> client = Trusting("token");
  ASSERT_THAT(cluster.StartWorker("worker-a", client), IsOk()) << cluster.Log("worker-a");
  ASSERT_THAT(cluster.StartWorker("worker-b", client), IsOk()) << cluster.Log("worker-b");

  auto nodes = [&](const std::vector<std::string>& flags) {
    absl::StatusOr<CommandResult> r = cluster.Quiltctl(Flags(flags, {"nodes", "-o", "json"}));
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : CommandResult{};
  };
  const CommandResult ok = nodes({"--tls-ca", Tls("ca.pem"), "--token-file", Tls("token")});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("worker-b"));
  // By another name the certificate carries.
  const CommandResult named = nodes({"--tls-ca", Tls("ca.pem"), "--token-file", Tls("token"),
                                     "--tls-server-name", "coordinator.test"});
  EXPECT_EQ(named.exit_code, 0) << named.err;

  const CommandResult plaintext = nodes({});
  EXPECT_NE(plaintext.exit_code, 0);
  EXPECT_THAT(plaintext.err, HasSubstr("if it serves TLS, pass --tls-ca"));
  const CommandResult untrusted =
      nodes({"--tls-ca", Tls("other_ca.pem"), "--token-file", Tls("token")});
  EXPECT_NE(untrusted.exit_code, 0);
  const CommandResult misnamed = nodes({"--tls-ca", Tls("ca.pem"), "--token-file", Tls("token"),
                                        "--tls-server-name", "elsewhere.test"});
  EXPECT_NE(misnamed.exit_code, 0);
  const CommandResult tokenless = nodes({"--tls-ca", Tls("ca.pem")});
  EXPECT_NE(tokenless.exit_code, 0);
  EXPECT_THAT(tokenless.err, HasSubstr("asks for a client token"));
  const CommandResult wrong =
      nodes({"--tls-ca", Tls("ca.pem"), "--token-file", Tls("wrong_token")});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_THAT(wrong.err, HasSubstr("not this coordinator's"));
  // A token is never sent in plaintext.
  const CommandResult exposed = nodes({"--token-file", Tls("token")});
  EXPECT_EQ(exposed.exit_code, 2);
  EXPECT_THAT(exposed.err, HasSubstr("needs TLS"));

  // A job: its executors find each other through the coordinator over TLS.
  cluster.SetClientFlags({"--tls-ca", Tls("ca.pem"), "--token-file", Tls("token")});
  const std::string mlp = RunfilePath("test/fixtures/mlp/");
  absl::StatusOr<CommandResult> submitted = cluster.Quiltctl(
      {"submit", mlp + "model.onnx", "--loss", "softmax_cross_entropy", "--batch", "16", "--steps",
       "6", "--strategy", "dp-even-ring", "--data", mlp + "x.npy," + mlp + "y.npy", "--watch"});
  ASSERT_THAT(submitted.status(), IsOk());
  EXPECT_EQ(submitted->exit_code, 0) << submitted->err << cluster.Log("worker-a");
  absl::StatusOr<CommandResult> jobs = cluster.Quiltctl({"jobs"});
  ASSERT_THAT(jobs.status(), IsOk());
  EXPECT_THAT(jobs->out, HasSubstr("SUCCEEDED"));
}

// Named tokens with roles: workers register and run a job with a worker's
// token, which may not read jobs; a viewer reads the cluster and jobs but
// may not cancel; a user submits but may not drain a node; an admin
// drains. Each refusal names the client, its role and the method; a job
// names the client that submitted it, and a cancel the one that asked.
TEST(Tls, EachClientTokenCallsWhatItsRoleAllows) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator("127.0.0.1:0", ServingTls("--tokens_file", "tokens")),
              IsOk());
  EXPECT_THAT(cluster.Log("coordinator"), HasSubstr("transport=tls+tokens"));
  // worker-a with a token bound to it (its executor's address exchange is
  // checked against the job's rank on worker-a), worker-b with any node's.
  ASSERT_THAT(cluster.StartWorker("worker-a", Trusting("worker_a_token")), IsOk())
      << cluster.Log("worker-a");
  ASSERT_THAT(cluster.StartWorker("worker-b", Trusting("worker_token")), IsOk())
      << cluster.Log("worker-b");
  auto as = [&](const std::string& token, const std::vector<std::string>& args) {
    absl::StatusOr<CommandResult> r =
        cluster.Quiltctl(Flags({"--tls-ca", Tls("ca.pem"), "--token-file", Tls(token)}, args));
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : CommandResult{};
  };
  const CommandResult nodes = as("viewer_token", {"nodes"});
  EXPECT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_THAT(nodes.out, HasSubstr("worker-b"));
  // A user's job runs on the workers (their executors' rendezvous with a
  // worker's token).
  const std::string mlp = RunfilePath("test/fixtures/mlp/");
  const CommandResult submitted =
      as("user_token", {"submit", mlp + "model.onnx", "--loss", "softmax_cross_entropy", "--batch",
                        "16", "--steps", "4", "--strategy", "dp-even-ring", "--data",
                        mlp + "x.npy," + mlp + "y.npy", "--watch"});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.err << cluster.Log("worker-a");
  const CommandResult jobs = as("viewer_token", {"jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("SUCCEEDED"));
  const CommandResult cancel = as("viewer_token", {"cancel", "job-x"});
  EXPECT_NE(cancel.exit_code, 0);
  EXPECT_THAT(cancel.err, HasSubstr("the client 'grafana' (role viewer) may not call "
                                    "quilt.v1.JobService/CancelJob"));
  const CommandResult read = as("worker_token", {"jobs"});
  EXPECT_NE(read.exit_code, 0);
  EXPECT_THAT(read.err, HasSubstr("'rack-1' (role worker) may not call"));
  const CommandResult drain = as("user_token", {"drain", "worker-b"});
  EXPECT_NE(drain.exit_code, 0);
  EXPECT_THAT(drain.err, HasSubstr("'alice' (role user) may not call "
                                   "quilt.v1.AdminService/SetNodeDraining"));
  // A worker's token bound to node worker-a: it may not register as
  // another node (the worker is refused, saying why; it retries, as it
  // would after any refusal, until stopped).
  absl::StatusOr<std::string> bound =
      cluster.StartWorker("worker-c", Trusting("worker_a_token"), absl::Seconds(5));
  EXPECT_FALSE(bound.ok()) << "worker-c started";
  EXPECT_THAT(cluster.Log("worker-c"),
              HasSubstr("the client 'rack-a' acts only for nodes worker-a, not 'worker-c'"));
  const CommandResult user_reads = as("user_token", {"nodes"});
  EXPECT_EQ(user_reads.exit_code, 0) << "a user reads too: " << user_reads.err;
  // Who did what: the job names its submitter, and a cancel its client.
  const CommandResult long_job =
      as("user_token", {"submit", mlp + "model.onnx", "--loss", "softmax_cross_entropy", "--batch",
                        "16", "--steps", "1000000", "--strategy", "dp-even-ring", "--data",
                        mlp + "x.npy," + mlp + "y.npy"});
  ASSERT_EQ(long_job.exit_code, 0) << long_job.err;
  const std::string id = long_job.out.substr(0, long_job.out.find('\n'));
  EXPECT_THAT(as("viewer_token", {"describe", "job", id}).out,
              HasSubstr("(" + id + "), submitted by alice"));
  EXPECT_EQ(as("admin_token", {"cancel", id, "--reason", "maintenance"}).exit_code, 0);
  EXPECT_THAT(as("viewer_token", {"describe", "job", id}).out,
              HasSubstr("cancelled by ops: maintenance"));
  const CommandResult admin = as("admin_token", {"drain", "worker-b"});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
  EXPECT_THAT(as("viewer_token", {"nodes"}).out, HasSubstr("Draining"));
}

// Mutual TLS: a coordinator that asks for client certificates serves the
// workers and executors that present one its client CA signed (a job runs
// to SUCCEEDED) and names a client by its certificate ("submitted by
// alice"); a client without a certificate, or with one from another CA, is
// refused and told what to pass or set.
TEST(Tls, ACoordinatorAskingForClientCertificatesServesOnlyClientsItsCaSigned) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator(
                  "127.0.0.1:0", {"--tls_cert_file", Tls("server.pem"), "--tls_key_file",
                                  Tls("server.key"), "--tls_client_ca_file", Tls("client_ca.pem")}),
              IsOk());
  EXPECT_THAT(cluster.Log("coordinator"), HasSubstr("transport=tls+client-certs"));
  const std::vector<std::string> worker = WorkerCertificate();
  ASSERT_THAT(cluster.StartWorker("worker-a", worker), IsOk()) << cluster.Log("worker-a");
  ASSERT_THAT(cluster.StartWorker("worker-b", worker), IsOk()) << cluster.Log("worker-b");
  const std::vector<std::string> alice = AliceCertificate();
  const CommandResult nodes = Client(cluster, alice, {"nodes"});
  EXPECT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_THAT(nodes.out, HasSubstr("worker-b"));
  const CommandResult certless = Client(cluster, {"--tls-ca", Tls("ca.pem")}, {"nodes"});
  EXPECT_NE(certless.exit_code, 0);
  EXPECT_THAT(certless.err, HasSubstr("if it asks for client certificates, pass --tls-cert"));
  const CommandResult stranger = Client(cluster,
                                        {"--tls-ca", Tls("ca.pem"), "--tls-cert",
                                         Tls("stranger.pem"), "--tls-key", Tls("stranger.key")},
                                        {"nodes"});
  EXPECT_NE(stranger.exit_code, 0);
  EXPECT_THAT(stranger.err, HasSubstr("it did not accept this one"));
  // A worker without a certificate does not register, and says what to set.
  EXPECT_FALSE(
      cluster.StartWorker("worker-c", {"--tls_ca_file", Tls("ca.pem")}, absl::Seconds(5)).ok());
  EXPECT_THAT(cluster.Log("worker-c"), HasSubstr("set tls_cert_file and tls_key_file"));

  // A job: both workers' executors find each other through the coordinator
  // with the workers' certificate.
  const std::string mlp = RunfilePath("test/fixtures/mlp/");
  const CommandResult submitted = Client(
      cluster, alice,
      {"submit", mlp + "model.onnx", "--loss", "softmax_cross_entropy", "--batch", "16", "--steps",
       "4", "--strategy", "dp-even-ring", "--data", mlp + "x.npy," + mlp + "y.npy"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id = submitted.out.substr(0, submitted.out.find('\n'));
  const CommandResult watched = Client(cluster, alice, {"watch", id});
  EXPECT_EQ(watched.exit_code, 0) << watched.err << cluster.Log("worker-a");
  const CommandResult described = Client(cluster, alice, {"describe", "job", id});
  EXPECT_THAT(described.out, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(described.out, HasSubstr("(" + id + "), submitted by alice"));
}

// Client certificates beside a tokens file: a certificate client (named
// by its certificate in the tokens file) needs no token and has its line's
// role, a worker's bound to its node; a token client needs a certificate
// too, and its token sets its role.
TEST(Tls, BesideTokensACertificateNamedInTheTokensFileHasItsRole) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator("127.0.0.1:0",
                                       Flags(ServingTls("--tokens_file", "cert_tokens"),
                                             {"--tls_client_ca_file", Tls("client_ca.pem")})),
              IsOk());
  EXPECT_THAT(cluster.Log("coordinator"), HasSubstr("transport=tls+client-certs+tokens"));
  const std::vector<std::string> worker = WorkerCertificate();
  ASSERT_THAT(cluster.StartWorker("worker-a", worker), IsOk()) << cluster.Log("worker-a");
  EXPECT_FALSE(cluster.StartWorker("worker-b", worker, absl::Seconds(5)).ok());
  EXPECT_THAT(cluster.Log("worker-b"),
              HasSubstr("the client 'worker-a' acts only for nodes worker-a, not 'worker-b'"));
  const std::vector<std::string> alice = AliceCertificate();
  const CommandResult nodes = Client(cluster, alice, {"nodes"});
  EXPECT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_THAT(nodes.out, HasSubstr("worker-a"));
  const CommandResult drain = Client(cluster, alice, {"drain", "worker-a"});
  EXPECT_NE(drain.exit_code, 0);
  EXPECT_THAT(drain.err, HasSubstr("the client 'alice' (role user) may not call"));
  const CommandResult certless =
      Client(cluster, {"--tls-ca", Tls("ca.pem"), "--token-file", Tls("admin_token")}, {"status"});
  EXPECT_NE(certless.exit_code, 0);
  EXPECT_THAT(certless.err, HasSubstr("pass --tls-cert"));
  // The client CA signed bob's certificate, but the tokens file names no
  // bob: without a token he is refused.
  const CommandResult unlisted =
      Client(cluster,
             {"--tls-ca", Tls("ca.pem"), "--tls-cert", Tls("bob.pem"), "--tls-key", Tls("bob.key")},
             {"status"});
  EXPECT_NE(unlisted.exit_code, 0);
  EXPECT_THAT(unlisted.err, HasSubstr("(this one's common name: 'bob')"));
  const CommandResult admin =
      Client(cluster, Flags(alice, {"--token-file", Tls("admin_token")}), {"drain", "worker-a"});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
  EXPECT_THAT(Client(cluster, alice, {"nodes"}).out, HasSubstr("Draining"));
}

// SIGHUP reads the tokens file again: a client added may call, one
// removed may not; a file that does not load leaves the clients as they
// were, and the log says why.
TEST(Tls, ASighupReloadsTheClientTokens) {
  LocalCluster cluster;
  const std::string tokens = cluster.dir().File("tokens");
  auto write = [&](const std::string& text) { std::ofstream(tokens, std::ios::trunc) << text; };
  const std::string ops = "ops admin quilt-test-admin-77f3c1\n";
  const std::string alice = "alice user quilt-test-user-41d8e0\n";
  write(ops);
  ASSERT_THAT(cluster.StartCoordinator("127.0.0.1:0",
                                       {"--tls_cert_file", Tls("server.pem"), "--tls_key_file",
                                        Tls("server.key"), "--tokens_file", tokens}),
              IsOk());
  auto as_alice = [&] {
    absl::StatusOr<CommandResult> r =
        cluster.Quiltctl({"--tls-ca", Tls("ca.pem"), "--token-file", Tls("user_token"), "jobs"});
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : CommandResult{};
  };
  // After the n-th reload's line is in the log.
  auto reload = [&](int n, const std::string& line) {
    cluster.StopCoordinator(SIGHUP);
    return Eventually(
        [&] {
          const std::string log = cluster.Log("coordinator");
          size_t count = 0;
          for (size_t at = log.find("SIGHUP: "); at != std::string::npos;
               at = log.find("SIGHUP: ", at + 1)) {
            ++count;
          }
          return count >= static_cast<size_t>(n) && absl::StrContains(log, line);
        },
        absl::Seconds(10));
  };
  EXPECT_THAT(as_alice().err, HasSubstr("not this coordinator's"));
  write(ops + alice);
  ASSERT_TRUE(reload(1, "reloaded the client tokens: 2 clients")) << cluster.Log("coordinator");
  const CommandResult added = as_alice();
  EXPECT_EQ(added.exit_code, 0) << added.err;
  write(ops + "alice root quilt-test-user-41d8e0\n");
  ASSERT_TRUE(reload(2, "the client tokens were not reloaded (the old ones stay)"))
      << cluster.Log("coordinator");
  EXPECT_THAT(cluster.Log("coordinator"), HasSubstr("unknown role 'root'"));
  EXPECT_EQ(as_alice().exit_code, 0) << "the old clients stay";
  write(ops);
  ASSERT_TRUE(reload(3, "reloaded the client tokens: 1 clients")) << cluster.Log("coordinator");
  EXPECT_THAT(as_alice().err, HasSubstr("not this coordinator's"));
}

TEST(Tls, DaemonsRefuseSettingsThatWouldSendPlaintextOffLoopback) {
  LocalCluster cluster;
  // Off loopback the coordinator needs TLS and a token.
  absl::StatusOr<CommandResult> c =
      RunCommand({RunfilePath("src/coordinator/quilt-coordinator"), "--listen_address", "0.0.0.0:0",
                  "--state_dir", cluster.dir().File("state")});
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_NE(c->exit_code, 0);
  EXPECT_THAT(c->err + c->out, HasSubstr("needs TLS"));
  // A key that is not PEM is named.
  c = RunCommand({RunfilePath("src/coordinator/quilt-coordinator"), "--listen_address",
                  "127.0.0.1:0", "--state_dir", cluster.dir().File("state"), "--tls_cert_file",
                  Tls("server.pem"), "--tls_key_file", Tls("token")});
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_NE(c->exit_code, 0);
  EXPECT_THAT(c->err + c->out, HasSubstr(Tls("token") + " is not PEM"));
  // A certificate that is not the key's.
  c = RunCommand({RunfilePath("src/coordinator/quilt-coordinator"), "--listen_address",
                  "127.0.0.1:0", "--state_dir", cluster.dir().File("state"), "--tls_cert_file",
                  Tls("ca.pem"), "--tls_key_file", Tls("server.key")});
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_NE(c->exit_code, 0);
  EXPECT_THAT(c->err + c->out, HasSubstr("is not the key of the certificate " + Tls("ca.pem")));
  // A worker does not talk plaintext to a coordinator off loopback.
  absl::StatusOr<CommandResult> w =
      RunCommand({RunfilePath("src/worker/quilt-worker"), "--coordinator_address", "192.0.2.1:7070",
                  "--node_id", "n1", "--cuda", "false"});
  ASSERT_THAT(w.status(), IsOk());
  EXPECT_NE(w->exit_code, 0);
  EXPECT_THAT(w->err + w->out, HasSubstr("needs TLS (tls_ca_file)"));
  // Nor quiltctl.
  absl::StatusOr<CommandResult> q =
      RunCommand({RunfilePath("src/cli/quiltctl"), "--coordinator", "192.0.2.1:7070", "nodes"});
  ASSERT_THAT(q.status(), IsOk());
  EXPECT_EQ(q->exit_code, 2);
  EXPECT_THAT(q->err, HasSubstr("pass --tls-ca"));
}

}  // namespace
}  // namespace quilt::testing
