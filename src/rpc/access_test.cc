// Client roles: what each may call (reads for viewers, jobs for users,
// the cluster calls for workers, everything for admins; the health
// service for all; a method not listed for admins alone), and tokens
// files read with every problem named by file and line.
#include "src/rpc/access.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt::rpc {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(RoleAllows, EachRoleItsMethodsAndAdminsEverything) {
  const std::string jobs = "/quilt.v1.JobService/", admin = "/quilt.v1.AdminService/",
                    cluster = "/quilt.v1.ClusterService/";
  struct Case {
    std::string method;
    bool viewer, user, worker;
  };
  for (const Case& c : std::vector<Case>{
           {jobs + "ListJobs", true, true, false},
           {jobs + "GetJob", true, true, false},
           {jobs + "WatchJob", true, true, false},
           {jobs + "GetJobLosses", true, true, false},
           {admin + "GetClusterStatus", true, true, false},
           {jobs + "SubmitJob", false, true, false},
           {jobs + "CancelJob", false, true, false},
           {jobs + "ExportJob", false, true, false},
           {jobs + "DeleteJob", false, true, false},
           {jobs + "PlanJob", false, true, false},
           {jobs + "ResumeJob", false, true, false},
           {jobs + "GetJobLogs", false, true, false},
           {admin + "ForgetNode", false, false, false},
           {admin + "SetNodeDraining", false, false, false},
           {cluster + "Register", false, false, true},
           {cluster + "Heartbeat", false, false, true},
           {cluster + "ExchangeAddresses", false, false, true},
           {"/grpc.health.v1.Health/Check", true, true, true},
           {"/grpc.health.v1.Health/Watch", true, true, true},
           {"/grpc.health.v1.Health/Other", false, false, false},
           {"/grpc.health.v1.Health/", false, false, false},
           // Not listed (a method added later, a typo, none): admins only.
           {jobs + "PauseJob", false, false, false},
           {jobs + "listjobs", false, false, false},
           {"", false, false, false},
       }) {
    EXPECT_EQ(RoleAllows(Role::kViewer, c.method), c.viewer) << c.method;
    EXPECT_EQ(RoleAllows(Role::kUser, c.method), c.user) << c.method;
    EXPECT_EQ(RoleAllows(Role::kWorker, c.method), c.worker) << c.method;
    EXPECT_TRUE(RoleAllows(Role::kAdmin, c.method)) << c.method;
  }
}

TEST(LoadTokensFile, NamesRolesAndTokens_CommentsAndBlankLinesSkipped) {
  testing::TempDir dir;
  std::ofstream(dir.File("ok"))
      << "# clients\n\nops admin tok-1-0123456789ab\n"
      << "  ci\tuser  tok-2-#123456789ab  # the CI\n"
      << "board.v2 viewer tok-3-0123456789ab\nn_1 worker tok-4-0123456789ab\n"
      << "n_2 worker tok-5-0123456789ab nodes=gpu-0*,gpu-10 # rack 2\n";
  absl::StatusOr<std::vector<ClientToken>> t = LoadTokensFile(dir.File("ok"));
  ASSERT_THAT(t.status(), IsOk());
  ASSERT_EQ(t->size(), 5u);
  EXPECT_TRUE((*t)[3].nodes.empty()) << "any node";
  EXPECT_EQ((*t)[4].nodes, (std::vector<std::string>{"gpu-0*", "gpu-10"}));
  EXPECT_TRUE(NodeMatches((*t)[4].nodes, "gpu-07"));
  EXPECT_TRUE(NodeMatches((*t)[4].nodes, "gpu-10"));
  EXPECT_FALSE(NodeMatches((*t)[4].nodes, "gpu-11"));
  EXPECT_FALSE(NodeMatches((*t)[4].nodes, "xgpu-01"));
  EXPECT_TRUE(NodeMatches({}, "anything"));
  EXPECT_EQ((*t)[1].name, "ci");
  EXPECT_EQ((*t)[1].role, Role::kUser);
  EXPECT_EQ((*t)[1].token, "tok-2-#123456789ab") << "a '#' within a token is the token's";
  EXPECT_EQ((*t)[2].role, Role::kViewer);
  EXPECT_EQ((*t)[3].role, Role::kWorker);
  EXPECT_EQ((*t)[3].token, "tok-4-0123456789ab");
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"ops admin\n",
            "line 1: expected NAME ROLE TOKEN or NAME ROLE certificate (three words; a "
            "worker's may add nodes=…), found 2"},
           {"ops admin #0123456789abcdef\n", "line 1: expected NAME ROLE TOKEN"},
           {"ops user 0123456789abcdef nodes=a\n", "a fourth word binds a worker's token"},
           {"n worker 0123456789abcdef racks=a\n", "not 'racks=a'"},
           {"n worker 0123456789abcdef nodes=a,,b\n", "an empty node pattern"},
           {"n worker 0123456789abcdef nodes=a extra\n", "found 5 words"},
           {"a admin 0123456789abcdef\nb root 0123456789abcdeg\n", "line 2: unknown role 'root'"},
           {"a admin 0123456789abcdef\na user 0123456789abcdeg\n",
            "line 2: the client 'a' is named twice"},
           {"a admin 0123456789abcdef\nb user 0123456789abcdef\n",
            "line 2: 'b' has a token another client has"},
           {"a admin 0123456789\x01"
            "abcdef\n",
            "line 1: the token must hold one token of printable"},
           {"a admin short-token\n", "has 11 characters: a token needs at least 16"},
           {"a\x1b[31m admin 0123456789abcdef\n", "may hold only letters, digits"},
           {std::string(65, 'n') + " admin 0123456789abcdef\n", "longer than 64 characters"},
           {"# nothing\n\n", "names no client"},
       }) {
    std::ofstream(dir.File("bad")) << text;
    EXPECT_THAT(LoadTokensFile(dir.File("bad")).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(dir.File("bad")), HasSubstr(why))))
        << text;
  }
  // Certificate clients: no token, bound to nodes as a worker's may be; two
  // of them share no "token".
  std::ofstream(dir.File("certs")) << "alice user certificate\n"
                                   << "gpu-7 worker certificate nodes=gpu-7 # its own node\n";
  absl::StatusOr<std::vector<ClientToken>> certs = LoadTokensFile(dir.File("certs"));
  ASSERT_THAT(certs.status(), IsOk());
  ASSERT_EQ(certs->size(), 2u);
  EXPECT_EQ((*certs)[0].token, "");
  EXPECT_EQ((*certs)[1].role, Role::kWorker);
  EXPECT_EQ((*certs)[1].nodes, std::vector<std::string>{"gpu-7"});
  EXPECT_THAT(LoadTokensFile(dir.File("missing")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot be read")));
}

}  // namespace
}  // namespace quilt::rpc
