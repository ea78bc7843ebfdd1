#include "src/common/metrics_server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/net.h"
#include "src/common/status_matchers.h"
#include "src/testing/raw_http.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Exchange(const std::string& address, const std::string& request) {
  return testing::RawHttpExchange(address, request);
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = MetricsServer::Start("127.0.0.1:0", "/metrics", [this] {
      return absl::StrCat("quilt_scrapes ", ++scrapes_, "\n");
    });
    ASSERT_THAT(s, IsOk());
    server_ = std::move(*s);
  }
  // A connection to the server that sends nothing yet (-1 if none).
  int Connect() {
    absl::StatusOr<HostPort> hp = ParseHostPort(server_->address());
    if (!hp.ok()) return -1;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(hp->port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    close(fd);
    return -1;
  }

  std::atomic<int> scrapes_{0};
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, AGetOfThePathAnswersThePageAsItIsAtEachScrape) {
  EXPECT_THAT(server_->address(), StartsWith("127.0.0.1:"));
  EXPECT_THAT(server_->address(), ::testing::Not(::testing::EndsWith(":0")));
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string first = Exchange(server_->address(), get);
  EXPECT_THAT(first, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(first, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(first, HasSubstr("Content-Length: 16\r\n"));
  EXPECT_THAT(first, ::testing::EndsWith("\r\n\r\nquilt_scrapes 1\n"));
  EXPECT_THAT(Exchange(server_->address(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
              ::testing::EndsWith("\r\n\r\nquilt_scrapes 2\n"));
  // HEAD: the headers only.
  EXPECT_THAT(Exchange(server_->address(), "HEAD /metrics HTTP/1.1\r\n\r\n"),
              ::testing::EndsWith("Connection: close\r\n\r\n"));
}

TEST_F(MetricsServerTest, OtherPathsMethodsAndNonHttpAreRefusedWithTheirCodes) {
  EXPECT_THAT(Exchange(server_->address(), "GET / HTTP/1.1\r\n\r\n"),
              AllOf(StartsWith("HTTP/1.1 404 Not Found"), HasSubstr("metrics are at /metrics")));
  EXPECT_THAT(Exchange(server_->address(), "POST /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(Exchange(server_->address(), "hello\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(server_->address(), std::string(20000, 'x')), StartsWith("HTTP/1.1 400 "));
  EXPECT_EQ(scrapes_.load(), 0);  // none of them rendered the page
}

TEST_F(MetricsServerTest, AClientThatSendsNothingDoesNotKeepOthersOut) {
  const int silent = Connect();
  ASSERT_GE(silent, 0);
  // Served after the silent one is dropped (Exchange waits up to 10 s).
  EXPECT_THAT(Exchange(server_->address(), "GET /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK"));
  close(silent);
}

TEST_F(MetricsServerTest, AClientThatDribblesItsRequestIsCutOffForTheNextOne) {
  const int slow = Connect();
  ASSERT_GE(slow, 0);
  // A byte every 300 ms: its 60-byte request would take 18 s, and each byte
  // comes well within any per-read timeout.
  std::atomic<int> sent{0};
  std::thread dribbler([&] {
    for (int i = 0; i < 60; ++i) {
      if (send(slow, "x", 1, MSG_NOSIGNAL) != 1) return;  // cut off
      ++sent;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  // The next scrape is answered (Exchange gives up after 10 s).
  EXPECT_THAT(Exchange(server_->address(), "GET /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK"));
  shutdown(slow, SHUT_RDWR);
  dribbler.join();
  close(slow);
  EXPECT_LT(sent.load(), 60);
}

TEST(MetricsServer, AnAddressItCannotListenOnIsRefusedByName) {
  EXPECT_THAT(MetricsServer::Start("nonsense", "/metrics", [] { return ""; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nonsense")));
  auto first = MetricsServer::Start("127.0.0.1:0", "/metrics", [] { return ""; });
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(MetricsServer::Start((*first)->address(), "/metrics", [] { return ""; }),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr((*first)->address())));
}

}  // namespace
}  // namespace quilt
