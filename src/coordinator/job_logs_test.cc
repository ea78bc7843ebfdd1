// Job logs asked of the workers with their heartbeats: each node is handed
// only its own requests, again only when unanswered for a while (a lost
// response), never in a stopping worker's last heartbeat; an answer from
// another node is ignored; a node not Ready is not asked; a silent node
// times out with an error; a shutdown ends the wait.
#include "src/coordinator/job_logs.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

// One heartbeat of `node` carrying `replies`; the requests it is handed.
std::vector<quilt::v1::LogRequest> Beat(JobLogs* logs, const std::string& node,
                                        const std::vector<quilt::v1::LogReply>& replies = {}) {
  quilt::v1::HeartbeatRequest request;
  request.set_node_id(node);
  for (const auto& r : replies) *request.add_log_replies() = r;
  quilt::v1::HeartbeatResponse response;
  logs->OnHeartbeat(request, &response);
  return {response.log_requests().begin(), response.log_requests().end()};
}

// A worker answering its node's requests as they come, with `text`.
class FakeWorker {
 public:
  FakeWorker(JobLogs* logs, std::string node, std::string text)
      : thread_([this, logs, node, text] {
          std::vector<quilt::v1::LogReply> replies;
          while (!stop_.load()) {
            for (const quilt::v1::LogRequest& r : Beat(logs, node, replies)) {
              quilt::v1::LogReply reply;
              reply.set_request_id(r.request_id());
              reply.set_text(absl::StrCat(text, " job=", r.job_id(), " lines=", r.lines(),
                                          r.run() != 0 ? absl::StrCat(" run=", r.run()) : "",
                                          r.follow() ? absl::StrCat(" from=", r.offset()) : ""));
              replies.push_back(reply);
              ++asked_;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        }) {}
  ~FakeWorker() {
    stop_.store(true);
    thread_.join();
  }
  int asked() const { return asked_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> asked_{0};
  std::thread thread_;
};

TEST(JobLogs, EachNodeAnswersItsOwnRequests) {
  JobLogs logs;
  FakeWorker a(&logs, "node-a", "from a");
  FakeWorker b(&logs, "node-b", "from b");
  std::vector<quilt::v1::LogReply> got =
      logs.Fetch("job-1", {"node-b", "node-a"}, 7, absl::Seconds(10));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text(), "from b job=job-1 lines=7");
  EXPECT_EQ(got[1].text(), "from a job=job-1 lines=7");
  EXPECT_EQ(got[0].error(), "");
  EXPECT_EQ(a.asked(), 1) << "handed once";
}

// A run asked of every node goes with each request; a followed node's
// request reads on from its offset and takes no run.
TEST(JobLogs, ARunGoesToEveryNodeNotFollowed) {
  JobLogs logs;
  FakeWorker a(&logs, "node-a", "from a");
  FakeWorker b(&logs, "node-b", "from b");
  std::vector<quilt::v1::LogReply> got =
      logs.Fetch("job-1", {"node-a", "node-b"}, 7, absl::Seconds(10), {}, -1);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text(), "from a job=job-1 lines=7 run=-1");
  EXPECT_EQ(got[1].text(), "from b job=job-1 lines=7 run=-1");
  got = logs.Fetch("job-1", {"node-a", "node-b"}, 7, absl::Seconds(10), {{"node-b", 12}}, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text(), "from a job=job-1 lines=7 run=2");
  EXPECT_EQ(got[1].text(), "from b job=job-1 lines=7 from=12");
}

TEST(JobLogs, HandedAgainOnlyWhenUnansweredForAWhile_NotToAStoppingWorker) {
  JobLogs logs(nullptr, absl::Milliseconds(300));
  std::vector<quilt::v1::LogReply> got;
  std::thread fetch([&] { got = logs.Fetch("job-1", {"node-a"}, 5, absl::Seconds(30)); });
  // A stopping worker's last heartbeat is handed nothing.
  quilt::v1::HeartbeatRequest stopping;
  stopping.set_node_id("node-a");
  stopping.set_stopping(true);
  for (int i = 0; i < 20; ++i) {
    quilt::v1::HeartbeatResponse none;
    logs.OnHeartbeat(stopping, &none);
    EXPECT_EQ(none.log_requests_size(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<quilt::v1::LogRequest> first;
  for (int i = 0; i < 1000 && first.empty(); ++i) {
    first = Beat(&logs, "node-a");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(first.size(), 1u);
  const absl::Time handed = absl::Now();
  // Its response is lost: the next beats, soon after, get nothing; one
  // past the re-hand time gets it again.
  std::vector<quilt::v1::LogRequest> again;
  while (again.empty() && absl::Now() - handed < absl::Seconds(10)) {
    again = Beat(&logs, "node-a");
    if (again.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(absl::Now() - handed, absl::Milliseconds(300));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].request_id(), first[0].request_id());
  quilt::v1::LogReply reply;
  reply.set_request_id(again[0].request_id());
  reply.set_text("at last");
  Beat(&logs, "node-a", {reply});
  fetch.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].text(), "at last");
}

TEST(JobLogs, ASilentNodeTimesOutAndAnotherNodesAnswerIsIgnored) {
  JobLogs logs;
  std::thread impostor([&] {
    // node-b answers node-a's request (it cannot see it, so it guesses
    // the id): ignored.
    for (int i = 0; i < 50; ++i) {
      quilt::v1::LogReply forged;
      forged.set_request_id("log-1");
      forged.set_text("forged");
      Beat(&logs, "node-b", {forged});
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<quilt::v1::LogReply> got = logs.Fetch("job-1", {"node-a"}, 5, absl::Seconds(0.3));
  impostor.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].text(), "");
  EXPECT_THAT(got[0].error(), HasSubstr("the worker on node-a did not answer in 0.3 s"));
  // The request is gone with its wait: node-a is handed nothing later.
  EXPECT_TRUE(Beat(&logs, "node-a").empty());
}

TEST(JobLogs, ANodeNotReadyIsNotAsked_AShutdownEndsTheWait) {
  JobLogs logs([](const std::string& node) { return node != "down"; });
  std::atomic<bool> fetched{false};
  std::vector<quilt::v1::LogReply> got;
  std::thread fetch([&] {
    got = logs.Fetch("job-1", {"down", "up"}, 5, absl::Seconds(60));
    fetched.store(true);
  });
  // "up" is handed its request; "down" never is.
  std::vector<quilt::v1::LogRequest> handed;
  for (int i = 0; i < 1000 && handed.empty(); ++i) {
    handed = Beat(&logs, "up");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_TRUE(Beat(&logs, "down").empty());
  EXPECT_FALSE(fetched.load());
  logs.Shutdown();
  fetch.join();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_THAT(got[0].error(), HasSubstr("node down is not Ready"));
  EXPECT_THAT(got[1].error(), HasSubstr("the coordinator is stopping"));
}

}  // namespace
}  // namespace quilt
