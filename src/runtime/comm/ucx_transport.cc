#include "src/runtime/comm/ucx_transport.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/common/status.h"

namespace quilt {
namespace {

std::string UcxError(const char* what, ucs_status_t s) {
  return absl::StrCat(what, ": ", ucs_status_string(s));
}

class UcxTransport;

struct UcxRequest final : public CommRequest {
  ~UcxRequest() override;
  UcxTransport* owner = nullptr;
  bool send = false;
  int peer = 0;
  uint64_t tag = 0;
  size_t bytes = 0;
  void* handle = nullptr;  // UCX's request, freed once complete
  // Guarded by the transport's mutex.
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t received = 0;
};

struct PeerState {
  UcxTransport* owner = nullptr;
  int rank = 0;
};

class UcxTransport final : public Transport {
  friend struct UcxRequest;
 public:
  UcxTransport(int rank, int size) : rank_(rank), size_(size), failed_(size) {
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
    const std::string mine(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(worker_, addr);
    ASSIGN_OR_RETURN(std::vector<std::string> all, rendezvous->Exchange(rank_, size_, mine, timeout));
    peers_.resize(size_);
    eps_.assign(size_, nullptr);
    for (int r = 0; r < size_; ++r) {
      peers_[r].owner = this;
      peers_[r].rank = r;
      ucp_ep_params_t ep = {};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(all[r].data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &UcxTransport::OnPeerError;
      ep.err_handler.arg = &peers_[r];
      s = ucp_ep_create(worker_, &ep, &eps_[r]);
      if (s != UCS_OK) {
        return absl::UnavailableError(UcxError(absl::StrCat("connecting to rank ", r).c_str(), s));
      }
    }
    progress_ = std::thread([this] { ProgressLoop(); });
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<CommRequest> Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    auto r = std::make_unique<UcxRequest>();
    Init(r.get(), true, peer, tag, bytes);
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxTransport::OnSend;
    p.user_data = r.get();
    ucs_status_ptr_t h = ucp_tag_send_nbx(eps_[peer], data, bytes, tag, &p);
    Posted(r.get(), h);
    return r;
  }

  std::unique_ptr<CommRequest> Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    auto r = std::make_unique<UcxRequest>();
    Init(r.get(), false, peer, tag, bytes);
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = &UcxTransport::OnRecv;
    p.user_data = r.get();
    ucs_status_ptr_t h = ucp_tag_recv_nbx(worker_, data, bytes, tag, ~uint64_t{0}, &p);
    Posted(r.get(), h);
    return r;
  }

  absl::Status Wait(CommRequest* request, absl::Time deadline) override {
    auto* r = static_cast<UcxRequest*>(request);
    absl::MutexLock lock(&mu_);
    auto settled = [&] { return r->done || failed_[r->peer].load() || shutting_down_; };
    while (!settled()) {
      if (mu_.AwaitWithDeadline(absl::Condition(&settled), deadline)) break;
      if (absl::Now() >= deadline) break;
    }
    if (!r->done) {
      const bool peer_died = failed_[r->peer].load();
      CancelLocked(r);
      if (r->done && r->status == UCS_OK) return absl::OkStatus();  // finished meanwhile
      const std::string what = Describe(*r);
      if (peer_died) return absl::UnavailableError(absl::StrCat(what, ": the peer failed"));
      if (shutting_down_) return absl::CancelledError(absl::StrCat(what, ": the transport shut down"));
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
    FreeLocked(r);
    if (r->status != UCS_OK) {
      if (r->status == UCS_ERR_MESSAGE_TRUNCATED) {
        return absl::DataLossError(absl::StrCat(Describe(*r), ": a larger message arrived"));
      }
      return absl::UnavailableError(absl::StrCat(Describe(*r), ": ", ucs_status_string(r->status)));
    }
    if (!r->send && r->received != r->bytes) {
      return absl::DataLossError(absl::StrFormat("%s: %d bytes arrived, %d expected", Describe(*r),
                                                 r->received, r->bytes));
    }
    return absl::OkStatus();
  }

  bool PeerFailed(int peer) const override { return failed_[peer].load(); }

 private:
  static std::string Describe(const UcxRequest& r) {
    return absl::StrFormat("%s rank %d (tag %#x, %d bytes)", r.send ? "send to" : "receive from",
                           r.peer, r.tag, r.bytes);
  }

  void Init(UcxRequest* r, bool send, int peer, uint64_t tag, size_t bytes) {
    r->owner = this;
    r->send = send;
    r->peer = peer;
    r->tag = tag;
    r->bytes = bytes;
    r->received = bytes;
  }

  void Posted(UcxRequest* r, ucs_status_ptr_t h) {
    absl::MutexLock lock(&mu_);
    if (h == nullptr) {
      r->done = true;  // completed in place
    } else if (UCS_PTR_IS_ERR(h)) {
      r->done = true;
      r->status = UCS_PTR_STATUS(h);
    } else {
      r->handle = h;
    }
    if (!r->done) ucp_worker_signal(worker_);  // the progress thread may sleep
  }

  // With mu_ held: cancels a pending request and waits (briefly) for UCX to
  // let go of its buffer. UCX may run the completion callback (which takes
  // mu_) inside the cancel, so mu_ is released around it.
  void CancelLocked(UcxRequest* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (r->handle != nullptr && !r->done) {
      void* handle = r->handle;
      mu_.Unlock();
      ucp_request_cancel(worker_, handle);
      ucp_worker_signal(worker_);
      mu_.Lock();
      mu_.AwaitWithTimeout(absl::Condition(&r->done), absl::Seconds(5));
    }
    if (r->done) FreeLocked(r);
  }

 public:
  // A request dropped before it completed: cancel it so that UCX does not
  // touch the request or its buffer afterwards.
  void Forget(UcxRequest* r) {
    absl::MutexLock lock(&mu_);
    if (!r->done) CancelLocked(r);
    FreeLocked(r);
  }

 private:

  void FreeLocked(UcxRequest* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (r->handle != nullptr) {
      ucp_request_free(r->handle);
      r->handle = nullptr;
    }
  }

  static void OnSend(void*, ucs_status_t status, void* user) {
    auto* r = static_cast<UcxRequest*>(user);
    absl::MutexLock lock(&r->owner->mu_);
    r->status = status;
    r->done = true;
  }

  static void OnRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
    auto* r = static_cast<UcxRequest*>(user);
    absl::MutexLock lock(&r->owner->mu_);
    r->status = status;
    if (status == UCS_OK && info != nullptr) r->received = info->length;
    r->done = true;
  }

  static void OnPeerError(void* arg, ucp_ep_h, ucs_status_t) {
    auto* p = static_cast<PeerState*>(arg);
    absl::MutexLock lock(&p->owner->mu_);
    p->owner->failed_[p->rank].store(true);
  }

  void ProgressLoop() {
    while (!stop_.load()) {
      while (ucp_worker_progress(worker_) != 0) {
      }
      const ucs_status_t s = ucp_worker_arm(worker_);
      if (s == UCS_ERR_BUSY) continue;  // more events arrived
      pollfd pfd = {efd_, POLLIN, 0};
      poll(&pfd, 1, 5);
    }
  }

  void Shutdown() {
    if (worker_ == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      shutting_down_ = true;
    }
    // Close the endpoints (flushing what is in flight), then stop progress.
    std::vector<void*> closing;
    for (ucp_ep_h ep : eps_) {
      if (ep == nullptr) continue;
      ucp_request_param_t p = {};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t h = ucp_ep_close_nbx(ep, &p);
      if (h != nullptr && !UCS_PTR_IS_ERR(h)) closing.push_back(h);
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
  }

  const int rank_, size_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::vector<ucp_ep_h> eps_;
  std::vector<PeerState> peers_;
  std::vector<std::atomic<bool>> failed_;
  std::atomic<bool> stop_{false};
  std::thread progress_;
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

UcxRequest::~UcxRequest() {
  if (owner != nullptr) owner->Forget(this);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(int rank, int size,
                                                              Rendezvous* rendezvous,
                                                              absl::Duration timeout) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside 0..", size - 1));
  }
  auto t = std::make_unique<UcxTransport>(rank, size);
  RETURN_IF_ERROR(t->Start(rendezvous, timeout));
  return std::unique_ptr<Transport>(std::move(t));
}

absl::Status Exchange(Transport* t, int send_peer, uint64_t send_tag, const void* send_data,
                      size_t send_bytes, int recv_peer, uint64_t recv_tag, void* recv_data,
                      size_t recv_bytes, absl::Time deadline) {
  std::unique_ptr<CommRequest> r = t->Recv(recv_peer, recv_tag, recv_data, recv_bytes);
  std::unique_ptr<CommRequest> s = t->Send(send_peer, send_tag, send_data, send_bytes);
  absl::Status a = t->Wait(s.get(), deadline);
  absl::Status b = t->Wait(r.get(), deadline);
  return a.ok() ? b : a;
}

}  // namespace quilt
