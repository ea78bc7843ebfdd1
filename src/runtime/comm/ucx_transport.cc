#include "src/runtime/comm/ucx_transport.h"

#include <poll.h>
#include <sched.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/common/net.h"
#include "src/common/status.h"
#include "src/runtime/comm/tags.h"

namespace quilt {
namespace {

std::string UcxError(const std::string& what, ucs_status_t s) {
  return absl::StrCat(what, ": ", ucs_status_string(s));
}

class UcxTransport;

// One posted operation; lives until its user callback has run.
struct Op {
  UcxTransport* owner = nullptr;
  uint64_t id = 0;
  bool send = false;
  int peer = 0;
  uint64_t tag = 0;
  size_t bytes = 0;
  CommCallback done;
  // Guarded by the transport's mutex. UCX's request is freed, and
  // cancelled, only on the progress thread.
  void* handle = nullptr;
  bool posted = false;     // the handle (if any) is known
  bool completed = false;  // UCX finished it
  // Ended by hand (a send to a failed peer): UCX may still read its
  // buffer, which `done`'s captures keep alive until the transport ends.
  bool forced = false;
  ucs_status_t status = UCS_OK;
  size_t received = 0;
};

// The polling windows run on the monotonic clock (a wall clock stepped
// back would keep them open).
using Clock = std::chrono::steady_clock;
const Clock::duration kSpin =
    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kUcxSpinSeconds));
const Clock::duration kIdleSpin =
    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kUcxIdleSpinSeconds));

// What tells processes on one machine apart from those on others: the
// host name and the kernel's boot id.
std::string HostIdentity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return absl::StrCat(LocalHostname(), "/", boot);
}

struct PeerState {
  UcxTransport* owner = nullptr;
  int rank = 0;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(int rank, int size, std::vector<std::string> names)
      : rank_(rank), size_(size), names_(std::move(names)), failed_(size) {
    for (auto& f : failed_) f.store(false);
  }
  ~UcxTransport() override { Shutdown(); }

  absl::Status Start(Rendezvous* rendezvous, absl::Duration timeout) {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return absl::UnavailableError(UcxError("reading the UCX configuration", s));
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return absl::UnavailableError(UcxError("starting UCX", s));
    ucp_worker_params_t wp = {};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) return absl::UnavailableError(UcxError("creating the UCX worker", s));
    s = ucp_worker_get_efd(worker_, &efd_);
    if (s != UCS_OK) return absl::UnavailableError(UcxError("the UCX worker's event fd", s));
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    s = ucp_worker_get_address(worker_, &addr, &len);
    if (s != UCS_OK) return absl::UnavailableError(UcxError("the UCX worker's address", s));
    const std::string host = HostIdentity();
    const std::string mine =
        absl::StrCat(host, "\n", absl::string_view(reinterpret_cast<const char*>(addr), len));
    ucp_worker_release_address(worker_, addr);
    ASSIGN_OR_RETURN(std::vector<std::string> all,
                     rendezvous->Exchange(rank_, size_, mine, timeout));
    peers_.resize(size_);
    eps_.assign(size_, nullptr);
    fast_eps_.assign(size_, nullptr);
    for (int r = 0; r < size_; ++r) {
      peers_[r].owner = this;
      peers_[r].rank = r;
      const size_t cut = all[r].find('\n');
      if (cut == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, " published a malformed transport address"));
      }
      const auto* address = reinterpret_cast<const ucp_address_t*>(all[r].data() + cut + 1);
      ucp_ep_params_t ep = {};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = address;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &UcxTransport::OnPeerError;
      ep.err_handler.arg = &peers_[r];
      s = ucp_ep_create(worker_, &ep, &eps_[r]);
      if (s != UCS_OK)
        return absl::UnavailableError(UcxError(absl::StrCat("connecting to rank ", r), s));
      if (all[r].compare(0, cut, host) != 0) continue;
      // A peer on this machine also gets an endpoint without peer-failure
      // handling, which is what lets UCX pick shared memory for it.
      ucp_ep_params_t fast = {};
      fast.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      fast.address = address;
      fast.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      s = ucp_ep_create(worker_, &fast, &fast_eps_[r]);
      if (s != UCS_OK) {
        return absl::UnavailableError(
            UcxError(absl::StrCat("connecting to rank ", r, " through shared memory"), s));
      }
    }
    progress_ = std::thread([this] { ProgressLoop(); });
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  uint64_t Send(int peer, uint64_t tag, const void* data, size_t bytes,
                CommCallback done) override {
    Op* op = NewOp(true, peer, tag, bytes, std::move(done));
    const uint64_t id = op->id;
    if (failed_[peer].load()) {
      Finish(op, UCS_ERR_CONNECTION_RESET);
      return id;
    }
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxTransport::OnSend;
    p.user_data = op;
    ucp_ep_h ep = fast_eps_[peer] != nullptr ? fast_eps_[peer] : eps_[peer];
    if (!PostOpen(op, [&] { return ucp_tag_send_nbx(ep, data, bytes, tag, &p); })) return id;
    // A failure seen by the progress thread before the post missed this
    // send: have it look again.
    if (failed_[peer].load()) {
      peer_failure_.store(true);
      ucp_worker_signal(worker_);
    }
    return id;
  }

  uint64_t Recv(int peer, uint64_t tag, void* data, size_t bytes, CommCallback done) override {
    Op* op = NewOp(false, peer, tag, bytes, std::move(done));
    // Posted even when the peer is gone: what it sent before it went may
    // wait among the unexpected messages, and matches now.
    ucp_request_param_t p = {};
    // Never completed in place: a message waiting among the unexpected ones
    // would give its length only through recv_info, which UCX does not
    // fill on every path (and a shorter message is no error to UCX). The
    // callback always has it.
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &UcxTransport::OnRecv;
    p.user_data = op;
    const uint64_t id = op->id;
    if (!PostOpen(op,
                  [&] { return ucp_tag_recv_nbx(worker_, data, bytes, tag, ~uint64_t{0}, &p); }))
      return id;
    // Read after posting: a failure before it is seen here, one after it
    // by the progress thread's cancel of posted receives.
    if (failed_[peer].load()) Cancel(id);  // nothing more will come
    return id;
  }

  void Cancel(uint64_t id) override {
    absl::MutexLock lock(&mu_);
    cancels_.push_back(id);
    ucp_worker_signal(worker_);
  }

  bool PeerFailed(int peer) const override { return failed_[peer].load(); }

  void SetComputeIdle(bool idle) override {
    if (idle) idle_since_.store(Clock::now().time_since_epoch().count());
    compute_idle_.store(idle);
    if (!idle) return;
    bool pending = false;
    {
      absl::MutexLock lock(&mu_);
      pending = !pending_.empty();
    }
    if (pending) {
      look_again_.fetch_add(1);
      ucp_worker_signal(worker_);  // asleep: poll again
    }
  }

  void CancelAll() override {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, op] : pending_) cancels_.push_back(id);
    ucp_worker_signal(worker_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](UcxTransport* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
                               return t->pending_.empty();
                             },
                             this),
                         absl::Seconds(10));
  }

 private:
  Op* NewOp(bool send, int peer, uint64_t tag, size_t bytes, CommCallback done) {
    auto* op = new Op;
    op->owner = this;
    op->send = send;
    op->peer = peer;
    op->tag = tag;
    op->bytes = bytes;
    op->received = bytes;
    op->done = std::move(done);
    absl::MutexLock lock(&mu_);
    op->id = next_id_++;
    pending_[op->id] = op;
    return op;
  }

  // Posts `op` by `post` unless Shutdown is closing the endpoints (a
  // callback of an operation it could not cancel may still post): then it
  // ends cancelled, and false.
  template <typename PostFn>
  bool PostOpen(Op* op, PostFn post) {
    absl::ReaderMutexLock open(&open_mu_);
    if (closing_) {
      Finish(op, UCS_ERR_CANCELED);
      return false;
    }
    Posted(op, post());
    return true;
  }

  void Posted(Op* op, ucs_status_ptr_t h) {
    if (h == nullptr) {
      Finish(op, UCS_OK);  // completed in place
      return;
    }
    if (UCS_PTR_IS_ERR(h)) {
      Finish(op, UCS_PTR_STATUS(h));
      return;
    }
    absl::MutexLock lock(&mu_);
    op->handle = h;
    op->posted = true;
    if (op->completed) finished_.push_back(op);  // UCX was faster than us
    look_again_.fetch_add(1);
    ucp_worker_signal(worker_);  // the progress thread may sleep
  }

  // An operation that never reached UCX, or finished inside the post.
  void Finish(Op* op, ucs_status_t status) {
    absl::MutexLock lock(&mu_);
    op->status = status;
    op->posted = true;
    op->completed = true;
    finished_.push_back(op);
    look_again_.fetch_add(1);
    ucp_worker_signal(worker_);
  }

  // UCX completion (progress thread, inside ucp_worker_progress).
  void Completed(Op* op, ucs_status_t status, size_t received) {
    absl::MutexLock lock(&mu_);
    if (op->completed) return;  // failed already with its peer (RunCancels)
    op->status = status;
    op->received = received;
    op->completed = true;
    if (op->posted) finished_.push_back(op);
  }

  // Progress thread: cancels what was asked, and receives waiting on
  // failed peers (they never complete by themselves). Sends waiting on a
  // failed peer finish now with an error: on the shared-memory endpoint
  // nothing else would end them (it has no failure handling); their UCX
  // requests are released unfinished, which UCX allows (no callback
  // follows). UCX may still read their buffers (a peer that is only
  // leaving still drains shared memory): what the callbacks hold is kept
  // until the transport ends.
  void RunCancels(bool peers_failed) {
    std::vector<void*> handles;
    {
      absl::MutexLock lock(&mu_);
      if (peers_failed) {
        for (const auto& [id, op] : pending_) {
          if (op->send && failed_[op->peer].load() && op->posted && !op->completed &&
              op->handle != nullptr) {
            op->status = UCS_ERR_CONNECTION_RESET;
            op->completed = true;
            op->forced = true;
            finished_.push_back(op);
          }
        }
      }
      for (uint64_t id : cancels_) {
        auto it = pending_.find(id);
        if (it != pending_.end() && it->second->posted && !it->second->completed &&
            it->second->handle != nullptr) {
          handles.push_back(it->second->handle);
        }
      }
      cancels_.clear();
      if (peers_failed) {
        for (const auto& [id, op] : pending_) {
          if (failed_[op->peer].load() && op->posted && !op->completed && op->handle != nullptr) {
            handles.push_back(op->handle);
          }
        }
      }
    }
    for (void* h : handles) ucp_request_cancel(worker_, h);
  }

  static void OnSend(void*, ucs_status_t status, void* user) {
    auto* op = static_cast<Op*>(user);
    op->owner->Completed(op, status, op->bytes);
  }

  static void OnRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
    auto* op = static_cast<Op*>(user);
    op->owner->Completed(op, status, status == UCS_OK && info != nullptr ? info->length : 0);
  }

  static void OnPeerError(void* arg, ucp_ep_h, ucs_status_t) {
    auto* p = static_cast<PeerState*>(arg);
    p->owner->failed_[p->rank].store(true);
    p->owner->peer_failure_.store(true);
  }

  absl::Status StatusOf(const Op& op) const {
    const std::string who = static_cast<size_t>(op.peer) < names_.size() && !names_[op.peer].empty()
                                ? absl::StrFormat("rank %d (%s)", op.peer, names_[op.peer])
                                : absl::StrFormat("rank %d", op.peer);
    const std::string what = absl::StrFormat(
        "%s %s (tag %#x, %d bytes)", op.send ? "send to" : "receive from", who, op.tag, op.bytes);
    if (failed_[op.peer].load() && op.status != UCS_OK) {
      return absl::UnavailableError(absl::StrCat(what, ": the peer failed"));
    }
    switch (op.status) {
      case UCS_OK:
        if (!op.send && op.received != op.bytes) {
          return absl::DataLossError(
              absl::StrFormat("%s: %d bytes arrived, %d expected", what, op.received, op.bytes));
        }
        return absl::OkStatus();
      case UCS_ERR_CANCELED:
        return absl::CancelledError(absl::StrCat(what, ": cancelled"));
      case UCS_ERR_MESSAGE_TRUNCATED:
        return absl::DataLossError(absl::StrCat(what, ": a larger message arrived"));
      default:
        return absl::UnavailableError(absl::StrCat(what, ": ", ucs_status_string(op.status)));
    }
  }

  void RunFinished() {
    std::deque<Op*> done;
    {
      absl::MutexLock lock(&mu_);
      done.swap(finished_);
    }
    for (Op* op : done) {
      if (op->handle != nullptr) ucp_request_free(op->handle);
      const absl::Status s = StatusOf(*op);
      op->done(s);
      absl::MutexLock lock(&mu_);
      if (op->forced) kept_.push_back(std::move(op->done));
      pending_.erase(op->id);
      delete op;
    }
  }

  void ProgressLoop() {
    Clock::time_point active = Clock::now();  // the last time anything happened
    while (!stop_.load()) {
      // Operations posted (or the compute going idle) after this point
      // are looked at again before any sleep: ucp_worker_arm may consume
      // the signal such a post sends.
      const uint64_t looks = look_again_.load();
      unsigned events = 0, n = 0;
      while ((n = ucp_worker_progress(worker_)) != 0) events += n;
      RunCancels(peer_failure_.exchange(false));
      while ((n = ucp_worker_progress(worker_)) != 0) events += n;
      bool busy = false, finished = false;
      {
        absl::MutexLock lock(&mu_);
        busy = !pending_.empty();
        finished = !finished_.empty();
      }
      RunFinished();
      const Clock::time_point now = Clock::now();
      if (events > 0 || finished) active = now;
      // While operations are in flight, poll without sleeping for a
      // moment after the last event: large messages move in rendezvous
      // steps that each need this side's progress, and not every
      // transport wakes the event fd. Past that, sleep briefly, leaving
      // the cores to the kernels; but while the compute waits (for these
      // very operations, typically), keep polling for longer: waking
      // costs more than the whole exchange on a busy host.
      const bool idle_spin =
          compute_idle_.load() &&
          now - std::max(active, Clock::time_point(Clock::duration(idle_since_.load()))) <
              kIdleSpin;
      if (busy && (now - active < kSpin || idle_spin)) {
        sched_yield();
        continue;
      }
      const ucs_status_t s = ucp_worker_arm(worker_);
      if (s == UCS_ERR_BUSY) continue;  // more events arrived
      if (look_again_.load() != looks) continue;
      {
        absl::MutexLock lock(&mu_);
        if (!finished_.empty() || !cancels_.empty()) continue;
      }
      pollfd pfd = {efd_, POLLIN, 0};
      if (poll(&pfd, 1, busy ? 1 : 5) > 0) active = Clock::now();
    }
    RunFinished();
  }

  void Shutdown() {
    if (worker_ == nullptr) return;
    if (progress_.joinable()) CancelAll();
    {
      // From here on nothing is posted: what CancelAll could not end may
      // still call back and post, and the endpoints are about to close.
      absl::MutexLock closing(&open_mu_);
      closing_ = true;
    }
    // Flush what is in flight (a last message must arrive before the
    // connection goes), forcing only endpoints of peers that failed.
    std::vector<void*> closing;
    for (size_t r = 0; r < eps_.size(); ++r) {
      for (ucp_ep_h ep : {fast_eps_[r], eps_[r]}) {
        if (ep == nullptr) continue;
        ucp_request_param_t p = {};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = failed_[r].load() ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        ucs_status_ptr_t h = ucp_ep_close_nbx(ep, &p);
        if (h != nullptr && !UCS_PTR_IS_ERR(h)) closing.push_back(h);
      }
    }
    const absl::Time until = absl::Now() + absl::Seconds(2);
    for (void* h : closing) {
      while (ucp_request_check_status(h) == UCS_INPROGRESS && absl::Now() < until) {
        ucp_worker_signal(worker_);
        absl::SleepFor(absl::Milliseconds(1));
      }
      ucp_request_free(h);
    }
    stop_.store(true);
    ucp_worker_signal(worker_);
    if (progress_.joinable()) progress_.join();
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    ucp_cleanup(context_);
    absl::MutexLock lock(&mu_);
    kept_.clear();
  }

  const int rank_, size_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::vector<ucp_ep_h> eps_;  // with peer-failure handling
  // Per rank on this machine (else null): the endpoint that sends use.
  std::vector<ucp_ep_h> fast_eps_;
  std::vector<PeerState> peers_;
  std::vector<std::string> names_;  // per rank, for messages (may be empty)
  std::vector<std::atomic<bool>> failed_;
  std::atomic<bool> peer_failure_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> compute_idle_{false};
  // Counts posts and other reasons for the progress thread to look again.
  std::atomic<uint64_t> look_again_{0};
  std::atomic<Clock::rep> idle_since_{0};  // Clock ticks
  std::thread progress_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Op*> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<Op*> finished_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> cancels_ ABSL_GUARDED_BY(mu_);
  // Callbacks of sends ended by hand, kept with what they hold.
  std::vector<CommCallback> kept_ ABSL_GUARDED_BY(mu_);
  // Posting holds it shared; Shutdown sets closing_ holding it alone.
  absl::Mutex open_mu_;
  bool closing_ ABSL_GUARDED_BY(open_mu_) = false;
};

// Blocking wait on one operation's callback.
struct SyncWait {
  absl::Mutex mu;
  bool done = false;
  absl::Status status;
};

absl::Status WaitSync(Transport* t, uint64_t id, const std::shared_ptr<SyncWait>& w,
                      absl::Time deadline, const std::string& what) {
  absl::MutexLock lock(&w->mu);
  if (!w->mu.AwaitWithDeadline(absl::Condition(&w->done), deadline)) {
    w->mu.Unlock();
    t->Cancel(id);
    w->mu.Lock();
    w->mu.AwaitWithTimeout(absl::Condition(&w->done), absl::Seconds(10));
    if (w->done && w->status.ok()) return absl::OkStatus();  // finished meanwhile
    return absl::DeadlineExceededError(what + ": timed out");
  }
  return w->status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(int rank, int size,
                                                              Rendezvous* rendezvous,
                                                              absl::Duration timeout,
                                                              std::vector<std::string> names) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside 0..", size - 1));
  }
  auto t = std::make_unique<UcxTransport>(rank, size, std::move(names));
  RETURN_IF_ERROR(t->Start(rendezvous, timeout));
  return std::unique_ptr<Transport>(std::move(t));
}

absl::Status Barrier(Transport* t, uint64_t id, absl::Time deadline) {
  // On the heap, held by each operation's callback: one that timed out may
  // still complete into it.
  auto byte = std::make_shared<char>(0);
  if (t->rank() != 0) {
    RETURN_IF_ERROR(SendSync(t, 0, MakeTag(0, TagKind::kBarrier, id, t->rank()), byte.get(), 1,
                             deadline, byte));
    return RecvSync(t, 0, MakeTag(0, TagKind::kBarrier, id, t->size() + t->rank()), byte.get(), 1,
                    deadline, byte);
  }
  for (int r = 1; r < t->size(); ++r) {
    RETURN_IF_ERROR(Annotate(
        RecvSync(t, r, MakeTag(0, TagKind::kBarrier, id, r), byte.get(), 1, deadline, byte),
        absl::StrCat("barrier ", id, ": rank ", r, " did not arrive")));
  }
  for (int r = 1; r < t->size(); ++r) {
    RETURN_IF_ERROR(SendSync(t, r, MakeTag(0, TagKind::kBarrier, id, t->size() + r), byte.get(), 1,
                             deadline, byte));
  }
  return absl::OkStatus();
}

absl::Status SendSync(Transport* t, int peer, uint64_t tag, const void* data, size_t bytes,
                      absl::Time deadline, std::shared_ptr<const void> keep) {
  auto w = std::make_shared<SyncWait>();
  const uint64_t id = t->Send(peer, tag, data, bytes, [w, keep](absl::Status s) {
    absl::MutexLock lock(&w->mu);
    w->status = std::move(s);
    w->done = true;
  });
  return WaitSync(t, id, w, deadline, absl::StrFormat("send to rank %d (tag %#x)", peer, tag));
}

absl::Status RecvSync(Transport* t, int peer, uint64_t tag, void* data, size_t bytes,
                      absl::Time deadline, std::shared_ptr<const void> keep) {
  auto w = std::make_shared<SyncWait>();
  const uint64_t id = t->Recv(peer, tag, data, bytes, [w, keep](absl::Status s) {
    absl::MutexLock lock(&w->mu);
    w->status = std::move(s);
    w->done = true;
  });
  return WaitSync(t, id, w, deadline, absl::StrFormat("receive from rank %d (tag %#x)", peer, tag));
}

}  // namespace quilt
