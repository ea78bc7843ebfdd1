// The executor's transport between two processes on this host, measured in
// one run beside raw loopback TCP:
//   - raw TCP: one stream one way (what iperf3 reports), and one stream each
//     way at once (what a two-process ring all-reduce does);
//   - ring all-reduce (float32 sum) over UCX for 1 KiB–64 MiB: the median
//     time and the bus bandwidth, 2(n-1)/n · bytes / time (NCCL's busbw;
//     for two processes, bytes / time), checked for the right sum; from
//     16 MiB, one-way TCP again right after each size (512 MiB);
//   - small-message latency: half the round trip of an 8-byte ping-pong,
//     and a 4-byte all-reduce;
//   - latency after idle (1 KiB and 1 MiB): the same when the receiving
//     process has not been polling for 2 ms, so its progress thread must
//     be woken (what a message between two computing executors sees);
//   - one large message one way (1, 16, 64 MiB).
// Prints one JSON object per line. The parent process is rank 0 and starts
// rank 1 (this binary with --rank 1).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "src/runtime/comm/collectives.h"
#include "src/runtime/comm/rendezvous.h"
#include "src/runtime/comm/tags.h"
#include "src/runtime/comm/ucx_transport.h"
#include "src/testing/subprocess.h"

namespace quilt {
namespace {

constexpr int64_t kTcpBytes = int64_t{1} << 30;  // per direction
constexpr size_t kTcpChunk = size_t{1} << 20;
// All-reduces of at least kTcpNextToBytes are followed by a one-way TCP
// stream of kTcpNextBytes.
constexpr int64_t kTcpNextToBytes = int64_t{16} << 20;
constexpr int64_t kTcpNextBytes = int64_t{512} << 20;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// --- Raw TCP -------------------------------------------------------------

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool Stream(int fd, int64_t bytes, bool send) {
  std::vector<char> buf(kTcpChunk, 1);
  for (int64_t done = 0; done < bytes; done += static_cast<int64_t>(kTcpChunk)) {
    if (!(send ? WriteAll(fd, buf.data(), buf.size()) : ReadAll(fd, buf.data(), buf.size())))
      return false;
  }
  return true;
}

// One stream one way over the connection: rank 1 sends `bytes`, rank 0
// acknowledges the last byte. Bytes/s, or 0 when the stream broke.
double TcpOneWay(int fd, int rank, int64_t bytes) {
  char ack = 0;
  const absl::Time start = absl::Now();
  const bool ok = rank == 1 ? Stream(fd, bytes, true) && ReadAll(fd, &ack, 1)
                            : Stream(fd, bytes, false) && WriteAll(fd, &ack, 1);
  return ok ? bytes / absl::ToDoubleSeconds(absl::Now() - start) : 0;
}

// Rank 0 listens and publishes its port in `dir`; rank 1 connects. Both
// run `one_way` (TcpOneWay) and then `both_ways` (each sends kTcpBytes
// while receiving as much). Returns the per-direction bandwidths in bytes/s
// (rank 0's figures are the ones printed) and the connection, kept open
// for measurements next to the all-reduces.
absl::Status RawTcp(int rank, const std::string& dir, double* one_way, double* both_ways,
                    int* connection) {
  int fd = -1;
  if (rank == 0) {
    const int ls = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return absl::UnavailableError("cannot listen on loopback");
    }
    {
      std::ofstream(dir + "/tcp_port.tmp") << ntohs(a.sin_port);
      std::filesystem::rename(dir + "/tcp_port.tmp", dir + "/tcp_port");
    }
    fd = accept(ls, nullptr, nullptr);
    close(ls);
  } else {
    int port = 0;
    for (int i = 0; i < 3000 && port == 0; ++i) {
      std::ifstream in(dir + "/tcp_port");
      if (!(in >> port)) absl::SleepFor(absl::Milliseconds(10));
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (port == 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      return absl::UnavailableError("cannot connect to rank 0 over loopback TCP");
    }
  }
  if (fd < 0) return absl::UnavailableError("no TCP connection");
  *one_way = TcpOneWay(fd, rank, kTcpBytes);
  bool ok = *one_way > 0;
  // Both ways at once.
  const absl::Time start = absl::Now();
  bool sent = false;
  std::thread sender([&] { sent = Stream(fd, kTcpBytes, true); });
  ok = ok && Stream(fd, kTcpBytes, false);
  sender.join();
  *both_ways = kTcpBytes / absl::ToDoubleSeconds(absl::Now() - start);
  *connection = fd;
  if (ok && sent) return absl::OkStatus();
  close(fd);
  return absl::DataLossError("the TCP stream broke");
}

// --- UCX -----------------------------------------------------------------

int64_t segment_elements = 0;  // 0: the executor's default

absl::Status AllReduceOnce(Transport* t, int rank, uint64_t id, int64_t step, float* data,
                           int64_t count) {
  AllReduceSpec spec;
  spec.collective_id = id;
  spec.step = step;
  spec.ranks = {0, 1};
  spec.nodes = {0, 1};
  spec.me = rank;
  spec.data = data;
  spec.count = count;
  if (segment_elements > 0) spec.segment_elements = segment_elements;
  absl::Notification done;
  absl::Status result;
  StartAllReduce(t, spec, [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(60)))
    return absl::DeadlineExceededError("all-reduce did not finish in 60 s");
  return result;
}

int Run(int rank, const std::string& dir, int64_t min_bytes, int64_t max_bytes) {
  double one_way = 0, both_ways = 0;
  int tcp = -1;
  if (absl::Status s = RawTcp(rank, dir, &one_way, &both_ways, &tcp); !s.ok()) {
    std::cerr << "comm_bench: raw TCP: " << s << "\n";
    return 1;
  }
  if (rank == 0) {
    std::cout << nlohmann::json{{"bench", "raw_tcp_loopback"},
                                {"bytes", kTcpBytes},
                                {"one_way_bytes_per_s", one_way},
                                {"each_way_when_both_bytes_per_s", both_ways}}
                     .dump()
              << std::endl;
  }
  DirectoryRendezvous rdv(dir + "/rdv");
  absl::StatusOr<std::unique_ptr<Transport>> t =
      CreateUcxTransport(rank, 2, &rdv, absl::Seconds(30));
  if (!t.ok()) {
    std::cerr << "comm_bench: " << t.status() << "\n";
    return 1;
  }
  Transport* tr = t->get();
  const absl::Time deadline = absl::Now() + absl::Minutes(5);
  // Ping-pong.
  {
    std::vector<double> rtt;
    char b[8] = {};
    for (int i = 0; i < 2000; ++i) {
      const uint64_t tag = MakeTag(i, TagKind::kTransfer, 1);
      const absl::Time s = absl::Now();
      absl::Status st =
          rank == 0 ? SendSync(tr, 1, tag, b, 8, deadline) : RecvSync(tr, 0, tag, b, 8, deadline);
      if (st.ok()) {
        const uint64_t back = MakeTag(i, TagKind::kTransfer, 2);
        st = rank == 0 ? RecvSync(tr, 1, back, b, 8, deadline)
                       : SendSync(tr, 0, back, b, 8, deadline);
      }
      if (!st.ok()) {
        std::cerr << "comm_bench: ping-pong: " << st << "\n";
        return 1;
      }
      if (i >= 100) rtt.push_back(absl::ToDoubleSeconds(absl::Now() - s));
    }
    if (rank == 0) {
      std::cout << nlohmann::json{{"bench", "ucx_ping_pong"},
                                  {"bytes", 8},
                                  {"one_way_latency_s", Median(rtt) / 2}}
                       .dump()
                << std::endl;
    }
  }
  // Latency after idle: each side waits 2 ms before it sends, so that the
  // other side's progress thread has gone to sleep; half the round trip
  // less the wait. Eager (1 KiB) and rendezvous (1 MiB) sizes.
  for (int64_t bytes : {int64_t{1} << 10, int64_t{1} << 20}) {
    constexpr absl::Duration kIdle = absl::Milliseconds(2);
    std::vector<char> buf(static_cast<size_t>(bytes), 1);
    std::vector<double> rtt;
    for (int i = 0; i < 60; ++i) {
      const uint64_t there = MakeTag(i, TagKind::kTransfer, 200 + (bytes >> 10));
      const uint64_t back = MakeTag(i, TagKind::kTransfer, 300 + (bytes >> 10));
      absl::Status st;
      if (rank == 0) {
        absl::SleepFor(kIdle);
        const absl::Time s = absl::Now();
        st = SendSync(tr, 1, there, buf.data(), buf.size(), deadline);
        if (st.ok()) st = RecvSync(tr, 1, back, buf.data(), buf.size(), deadline);
        if (i >= 10) rtt.push_back(absl::ToDoubleSeconds(absl::Now() - s - kIdle));
      } else {
        st = RecvSync(tr, 0, there, buf.data(), buf.size(), deadline);
        // Exactly the wait (a sleep may overshoot), on this thread only.
        for (const absl::Time until = absl::Now() + kIdle; absl::Now() < until;) {
        }
        if (st.ok()) st = SendSync(tr, 0, back, buf.data(), buf.size(), deadline);
      }
      if (!st.ok()) {
        std::cerr << "comm_bench: ping-pong after idle: " << st << "\n";
        return 1;
      }
    }
    if (rank == 0) {
      std::cout << nlohmann::json{{"bench", "ucx_ping_pong_after_idle"},
                                  {"bytes", bytes},
                                  {"one_way_latency_s", Median(rtt) / 2}}
                       .dump()
                << std::endl;
    }
  }
  // Point-to-point, one way: rank 1 sends, rank 0 receives.
  for (int64_t bytes : {int64_t{1} << 20, int64_t{16} << 20, int64_t{64} << 20}) {
    std::vector<char> buf(static_cast<size_t>(bytes), 1);
    std::vector<double> times;
    for (int i = 0; i < 7; ++i) {
      const uint64_t tag = MakeTag(i, TagKind::kTransfer, 100 + (bytes >> 20));
      const absl::Time s = absl::Now();
      absl::Status st = rank == 1 ? SendSync(tr, 0, tag, buf.data(), buf.size(), deadline)
                                  : RecvSync(tr, 1, tag, buf.data(), buf.size(), deadline);
      if (st.ok()) {
        const uint64_t ack = MakeTag(i, TagKind::kTransfer, 99);
        char a = 0;
        st = rank == 1 ? RecvSync(tr, 0, ack, &a, 1, deadline)
                       : SendSync(tr, 1, ack, &a, 1, deadline);
      }
      if (!st.ok()) {
        std::cerr << "comm_bench: point-to-point: " << st << "\n";
        return 1;
      }
      if (i >= 2) times.push_back(absl::ToDoubleSeconds(absl::Now() - s));
    }
    if (rank == 0) {
      std::cout << nlohmann::json{{"bench", "ucx_point_to_point"},
                                  {"bytes", bytes},
                                  {"median_s", Median(times)},
                                  {"bytes_per_s", bytes / Median(times)}}
                       .dump()
                << std::endl;
    }
  }
  // All-reduce sweep.
  uint64_t id = 10;
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4, ++id) {
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    std::vector<float> data(static_cast<size_t>(count));
    // About 1 GiB per size (16 MiB: 64 times; 0.3–0.6 s on loopback): a
    // moment of other load on a shared host moves a median of a few
    // tenths of a second.
    const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / bytes, 5, 500));
    std::vector<double> times;
    bool right = true;
    for (int i = 0; i < iters + 2; ++i) {
      std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
      const absl::Time s = absl::Now();
      if (absl::Status st = AllReduceOnce(tr, rank, id, i, data.data(), count); !st.ok()) {
        std::cerr << "comm_bench: all-reduce of " << bytes << " bytes: " << st << "\n";
        return 1;
      }
      if (i >= 2) times.push_back(absl::ToDoubleSeconds(absl::Now() - s));
      right = right && data.front() == 3.0f && data.back() == 3.0f;
    }
    const double t_med = Median(times);
    // Raw TCP right after the large sizes too: this host's speed changes
    // within seconds (shared cores), so the goal's comparison is made with
    // the TCP figure of the same moment as well as with the run's.
    double tcp_now = 0;
    if (bytes >= kTcpNextToBytes) {
      tcp_now = TcpOneWay(tcp, rank, kTcpNextBytes);
      if (tcp_now <= 0) {
        std::cerr << "comm_bench: the TCP stream broke\n";
        return 1;
      }
    }
    if (rank == 0) {
      nlohmann::json row = {{"bench", "ucx_ring_allreduce"},
                            {"processes", 2},
                            {"bytes", count * 4},
                            {"iterations", iters},
                            {"median_s", t_med},
                            {"bus_bytes_per_s", count * 4 / t_med},
                            {"sum_correct", right}};
      if (tcp_now > 0) row["tcp_one_way_bytes_per_s_right_after"] = tcp_now;
      std::cout << row.dump() << std::endl;
    }
    if (!right) return 1;
  }
  close(tcp);
  return Barrier(tr, 1, absl::Now() + absl::Seconds(30)).ok() ? 0 : 1;
}

}  // namespace
}  // namespace quilt

int main(int argc, char** argv) {
  CLI::App app("Transport benchmark: UCX all-reduce and latency beside raw loopback TCP");
  int rank = 0;
  std::string dir;
  int64_t min_bytes = 1024, max_bytes = int64_t{64} << 20;
  app.add_option("--rank", rank, "Internal: the rank of a started process");
  app.add_option("--dir", dir, "Internal: the shared directory");
  app.add_option("--min-bytes", min_bytes, "Smallest all-reduce");
  app.add_option("--max-bytes", max_bytes, "Largest all-reduce (sizes grow 4x)");
  app.add_option("--segment-elements", quilt::segment_elements,
                 "Elements per all-reduce message (default: the executor's)");
  CLI11_PARSE(app, argc, argv);
  if (min_bytes < 4 || max_bytes < min_bytes) {
    std::cerr << "comm_bench: need 4 <= --min-bytes <= --max-bytes\n";
    return 2;
  }
  if (rank != 0) return quilt::Run(rank, dir, min_bytes, max_bytes);
  char tmpl[] = "/tmp/quilt-comm-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  dir = tmpl;
  std::filesystem::create_directories(dir + "/rdv");
  absl::StatusOr<quilt::testing::Subprocess> peer = quilt::testing::Subprocess::Start(
      {"/proc/self/exe", "--rank", "1", "--dir", dir, "--min-bytes", std::to_string(min_bytes),
       "--max-bytes", std::to_string(max_bytes), "--segment-elements",
       std::to_string(quilt::segment_elements)},
      dir + "/rank1.log");
  if (!peer.ok()) {
    std::cerr << "comm_bench: " << peer.status() << "\n";
    return 1;
  }
  const int rc = quilt::Run(0, dir, min_bytes, max_bytes);
  std::optional<int> st = peer->Wait(absl::Seconds(60));
  if (!st.has_value() || *st != 0) {
    std::ifstream log(dir + "/rank1.log");
    std::cerr << "comm_bench: rank 1 failed:\n" << log.rdbuf();
  }
  std::filesystem::remove_all(dir);
  return rc != 0 || !st.has_value() || *st != 0 ? 1 : 0;
}
