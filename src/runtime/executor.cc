#include "src/runtime/executor.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"
#include "src/graph/validate.h"
#include "src/runtime/executor_impl.h"
#include "src/runtime/initializers.h"
#include "src/runtime/rows.h"

namespace quilt {

using quilt::v1::Instruction;

// --- Setup ---------------------------------------------------------------

Executor::Impl::Impl(quilt::v1::DistributedProgram program, std::vector<std::string> world,
                     int rank, Transport* transport, Dataset* data, ExecutorOptions options)
    : program_(std::move(program)),
      world_(std::move(world)),
      rank_(rank),
      transport_(transport),
      data_(data),
      options_(std::move(options)) {}

Executor::Impl::~Impl() { StopThreads(); }

void Executor::Impl::StopThreads() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& d : devices_) {
    if (d->thread.joinable()) d->thread.join();
  }
}

int Executor::Impl::RankOfDevice(const std::string& device_id) const {
  auto it = program_device_.find(device_id);
  return it == program_device_.end() ? -1 : device_rank_[it->second];
}

absl::Status Executor::Impl::Init() {
  ASSIGN_OR_RETURN(graph_, Graph::FromProto(program_.graph()));
  // The kernels trust the graph's shapes, dtypes and arities: a program
  // whose graph does not hold together is refused here, not run into.
  if (absl::Status s = ValidateGraph(&graph_); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the program's graph: ", s.message()));
  }
  // graph_ has the model's weights now; the message's copy of them would
  // only double what the process holds through the run.
  program_.clear_graph();
  if (!graph_.has_backward)
    return absl::InvalidArgumentError("the program's graph has no backward pass");
  batch_ = program_.global_batch();
  if (batch_ < 1) return absl::InvalidArgumentError("the program has no global batch");
  const int64_t micro = std::max<int64_t>(1, program_.micro_batches());
  if (micro >= (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the program runs ", micro, " micro-batches; at most 1048575 are run"));
  }
  if (micro > batch_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the program's batch ", batch_, " has fewer rows than its ", micro, " micro-batches"));
  }
  micro_batches_ = static_cast<int>(micro);
  for (size_t i = 0; i < graph_.tensors().size(); ++i)
    tensor_ids_[graph_.tensors()[i].name] = static_cast<int>(i);
  for (size_t i = 0; i < graph_.ops.size(); ++i) {
    const Op& op = graph_.ops[i];
    op_ids_[op.name] = static_cast<int>(i);
    kernels_.push_back(KernelRegistry::Global().Find("cpu", op.type));
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    is_update_.push_back(schema != nullptr && schema->is_update);
  }
  if (!graph_.loss.output.empty() && tensor_ids_.contains(graph_.loss.output)) {
    loss_tensor_ = tensor_ids_.at(graph_.loss.output);
  }
  for (const StateUpdate& u : graph_.updates) {
    auto src = tensor_ids_.find(u.source), dst = tensor_ids_.find(u.target);
    if (src == tensor_ids_.end() || dst == tensor_ids_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the graph's state update ", u.source, " → ",
                                                     u.target, " names an unknown tensor"));
    }
    update_ids_.push_back({src->second, dst->second});
  }
  // Devices: which process runs each.
  for (int i = 0; i < program_.devices_size(); ++i) {
    const std::string& id = program_.devices(i).device();
    const std::string node = id.substr(0, id.find('/'));
    auto it = std::find(world_.begin(), world_.end(), node);
    if (it == world_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", id, " belongs to node ", node,
                       ", which runs in no process (world: ", absl::StrJoin(world_, ", "), ")"));
    }
    program_device_[id] = i;
    device_rank_.push_back(static_cast<int>(it - world_.begin()));
    device_node_.push_back(node);
  }
  for (const auto& g : program_.groups()) {
    std::vector<int>& members = groups_[g.id()];
    for (const std::string& d : g.devices()) {
      auto it = program_device_.find(d);
      if (it == program_device_.end()) {
        return absl::InvalidArgumentError("group " + std::to_string(g.id()) + " names device " + d +
                                          ", which has no program");
      }
      members.push_back(it->second);
    }
    if (g.node_bytes_per_s_size() != 0) {
      if (g.node_bytes_per_s_size() != g.devices_size()) {
        return absl::InvalidArgumentError(absl::StrCat("group ", g.id(), " has ", g.devices_size(),
                                                       " devices but ", g.node_bytes_per_s_size(),
                                                       " node bandwidths"));
      }
      for (double b : g.node_bytes_per_s()) {
        if (!(b > 0) || !std::isfinite(b)) {
          return absl::InvalidArgumentError(
              absl::StrCat("group ", g.id(), " has a node bandwidth of ", b, " bytes/s"));
        }
      }
      group_node_bytes_[g.id()].assign(g.node_bytes_per_s().begin(), g.node_bytes_per_s().end());
    }
  }
  absl::flat_hash_map<int64_t, int> node_of_id;
  for (int i = 0; i < program_.devices_size(); ++i) {
    const auto& dp = program_.devices(i);
    for (const Instruction& ins : dp.instructions()) {
      if (ins.has_ps_push()) push_device_[ins.ps_push().tag()] = i;
    }
    if (device_rank_[i] != rank_) continue;
    auto dev = std::make_unique<Device>();
    dev->owner = this;
    dev->id = dp.device();
    dev->topo_index = i;
    auto slow = options_.slowdown.find(dev->id);
    if (slow != options_.slowdown.end()) dev->slowdown = std::max(1.0, slow->second);
    const int local = static_cast<int>(devices_.size());
    for (const Instruction& ins : dp.instructions()) {
      Node n;
      n.ins = &ins;
      n.device = local;
      n.compute = ins.has_compute() || ins.has_concat();
      if (ins.has_compute()) {
        auto op = op_ids_.find(ins.compute().op());
        if (op == op_ids_.end()) {
          return absl::InvalidArgumentError("instruction " + std::to_string(ins.id()) +
                                            " runs unknown op '" + ins.compute().op() + "'");
        }
        if (kernels_[op->second] == nullptr) {
          return absl::InvalidArgumentError("op '" + ins.compute().op() + "' (" +
                                            graph_.ops[op->second].type + ") has no CPU kernel");
        }
      }
      if (!node_of_id.emplace(ins.id(), static_cast<int>(nodes_.size())).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("instruction id ", ins.id(), " is used twice (on ", dp.device(), ")"));
      }
      nodes_.push_back(n);
    }
    for (const auto& r : dp.persistent()) {
      auto t = tensor_ids_.find(r.tensor());
      if (t == tensor_ids_.end())
        return absl::InvalidArgumentError("unknown tensor '" + r.tensor() + "'");
      dev->persistent[InstanceKey{t->second, r.begin(), r.end()}] = true;
    }
    for (const auto& r : dp.feeds()) {
      if (!tensor_ids_.contains(r.tensor())) {
        return absl::InvalidArgumentError(
            absl::StrCat(dp.device(), " is fed unknown tensor '", r.tensor(), "'"));
      }
      dev->feeds.push_back(r);
    }
    dev->loss_copy = dp.loss_copy();
    devices_.push_back(std::move(dev));
  }
  RETURN_IF_ERROR(CheckInstructions());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (int64_t dep : nodes_[n].ins->deps()) {
      auto it = node_of_id.find(dep);
      if (it == node_of_id.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "instruction ", nodes_[n].ins->id(), " depends on instruction ", dep,
            ", which another process runs (transfers, not dependencies, connect processes)"));
      }
      nodes_[it->second].succ.push_back(static_cast<int>(n));
      ++nodes_[n].deps;
    }
  }
  RETURN_IF_ERROR(CheckAcyclic());
  PlanFrees();
  // Initial persistent values: parameters from their initializers (sliced
  // for shards), optimizer state zeros, constants; or restored.
  std::map<std::string, Tensor> restored;
  if (options_.restore != nullptr) {
    ASSIGN_OR_RETURN(restored, Restored());
  }
  // Each value is made once per tensor; the last of this process's
  // instances of it takes the value itself, the others copies (a large
  // model is not held again beside its devices' copies). A parameter's
  // initial value is taken out of the graph: nothing reads it there again.
  absl::flat_hash_map<int, int> instances;
  for (auto& dev : devices_) {
    for (const auto& [key, unused] : dev->persistent) ++instances[key.tensor];
  }
  absl::flat_hash_map<int, Tensor> whole;
  absl::flat_hash_set<int> shared;  // values the graph keeps too (constants)
  for (auto& dev : devices_) {
    for (const auto& [key, unused] : dev->persistent) {
      const TensorInfo& info = graph_.tensors()[key.tensor];
      auto w = whole.find(key.tensor);
      if (w == whole.end()) {
        Tensor value;
        ParameterSpec* p = graph_.FindParameter(info.name);
        if (auto r = restored.find(info.name); r != restored.end()) {
          value = std::move(r->second);
        } else if (p != nullptr && p->value.has_value()) {
          value = std::move(*p->value);
          p->value.reset();
        } else if (p != nullptr) {
          ASSIGN_OR_RETURN(value, InitialValue(*p, info.shape.Concrete(1)));
        } else if (graph_.constants.count(info.name)) {
          value = graph_.constants.at(info.name);
          shared.insert(key.tensor);
        } else {
          ASSIGN_OR_RETURN(value, Tensor::Zeros(info.dtype, info.shape.Concrete(1)));
        }
        w = whole.emplace(key.tensor, std::move(value)).first;
      }
      const bool last = --instances[key.tensor] == 0 && !shared.count(key.tensor);
      Tensor v;
      if (key.begin == 0 && key.end == 0) {
        v = last ? std::move(w->second) : w->second.Clone();
      } else {
        ASSIGN_OR_RETURN(v, SliceRows(w->second, 0, key.begin, key.end));
        v = v.Clone();
      }
      dev->store.Put(key, std::move(v));
    }
  }
  bool any_feed = false;
  for (const auto& d : devices_) any_feed |= !d->feeds.empty();
  if (any_feed) {
    ASSIGN_OR_RETURN(DataSignature sig, DataSignatureOf(graph_));
    for (const TensorInfo& t : sig.inputs) input_names_.push_back(t.name);
    label_name_ = sig.label.name;
    if (data_ == nullptr)
      return absl::InvalidArgumentError("the program reads data, but no dataset was given");
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    devices_[d]->thread = std::thread([this, d] {
      Device& dev = *devices_[d];
      for (;;) {
        int node = -1;
        {
          absl::MutexLock lock(&mu_);
          if (!stop_ && (dev.ready.empty() || posting_)) {
            // While every device of this process waits, the transport may
            // poll rather than sleep: this process has no kernel to run.
            const int all = static_cast<int>(devices_.size());
            if (++idle_threads_ == all && transport_ != nullptr) transport_->SetComputeIdle(true);
            mu_.Await(absl::Condition(
                +[](Device* d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                  return d->owner->stop_ || (!d->ready.empty() && !d->owner->posting_);
                },
                &dev));
            if (idle_threads_-- == all && transport_ != nullptr) transport_->SetComputeIdle(false);
          }
          if (stop_) return;
          node = -dev.ready.top().second;
          dev.ready.pop();
          if (!error_.ok()) continue;  // the step failed: drop it
          ++running_;
        }
        const absl::Time start = absl::Now();
        absl::Status s = nodes_[node].ins->has_compute() ? Compute(node) : Concat(node);
        const absl::Time end = absl::Now();
        const double took = absl::ToDoubleSeconds(end - start);
        if (options_.trace) Record(node, start, false, end);
        if (s.ok()) {
          Done(node);
        } else {
          Fail(node, s);
        }
        absl::MutexLock lock(&mu_);
        dev.busy_s += took;
        --running_;
      }
    });
  }
  if (options_.trace) {
    // Growing the trace mid-step would copy it on an instruction's path.
    constexpr int64_t kMaxReserved = int64_t{1} << 20;
    absl::MutexLock lock(&trace_mu_);
    trace_.reserve(static_cast<size_t>(
        std::min(kMaxReserved, static_cast<int64_t>(nodes_.size()) * options_.steps)));
  }
  trace_origin_ = absl::Now();
  return absl::OkStatus();
}

// --- Scheduling ----------------------------------------------------------

std::string Executor::Impl::Describe(int node) const {
  const Instruction& ins = *nodes_[node].ins;
  std::string what;
  switch (ins.kind_case()) {
    case Instruction::kCompute:
      what = "op '" + ins.compute().op() + "'";
      break;
    case Instruction::kSend:
      what = "send of '" + ins.send().range().tensor() + "' to " + ins.send().peer_device();
      break;
    case Instruction::kRecv:
      what = "receive of '" + ins.recv().range().tensor() + "' from " + ins.recv().peer_device();
      break;
    case Instruction::kAllReduce:
      what = absl::StrCat("all-reduce ", ins.all_reduce().collective_id());
      break;
    case Instruction::kPsPush:
      what =
          "push of '" + ins.ps_push().gradient().tensor() + "' to " + ins.ps_push().server_device();
      break;
    case Instruction::kPsPull:
      what = "pull of '" + ins.ps_pull().parameter().tensor() + "' from " +
             ins.ps_pull().server_device();
      break;
    case Instruction::kPsAccumulate:
      what = "accumulation of '" + ins.ps_accumulate().gradient().tensor() + "'";
      break;
    case Instruction::kConcat:
      what = "concatenation of '" + ins.concat().target().tensor() + "'";
      break;
    default:
      what = "instruction";
  }
  return absl::StrCat("instruction ", ins.id(), " (", what, ") on ",
                      devices_[nodes_[node].device]->id);
}

void Executor::Impl::Done(int node) {
  std::vector<int> ready;
  // (Dropped and committed under the step's lock, so that the step cannot
  // end, and the next write the tensor again, before; the values are
  // destroyed after.)
  std::vector<Tensor> dropped;
  {
    absl::MutexLock lock(&mu_);
    --remaining_;
    nodes_[node].finished = true;
    if (!error_.ok()) return;
    dropped = Release(node);
    for (int s : nodes_[node].succ) {
      if (--nodes_[s].pending == 0) ready.push_back(s);
    }
    for (int s : ready) {
      if (nodes_[s].compute)
        devices_[nodes_[s].device]->ready.push({nodes_[s].ins->priority(), -s});
    }
  }
  for (int s : ready) {
    if (!nodes_[s].compute) Dispatch(s);
  }
}

void Executor::Impl::Dispatch(int node) {
  switch (nodes_[node].ins->kind_case()) {
    case Instruction::kSend:
      StartSend(node);
      break;
    case Instruction::kRecv:
      StartRecv(node);
      break;
    case Instruction::kAllReduce:
      StartAllReduce(node);
      break;
    case Instruction::kPsPush:
      StartPush(node);
      break;
    case Instruction::kPsAccumulate:
      StartAccumulate(node);
      break;
    case Instruction::kPsPull:
      StartPull(node);
      break;
    default:
      Done(node);  // nothing to do (e.g. Split)
  }
}

void Executor::Impl::Fail(int node, const absl::Status& s) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) {
    error_ = absl::Status(s.code(),
                          absl::StrCat("step ", step_, ": ", Describe(node), ": ", s.message()));
  }
}

void Executor::Impl::BeginExtra() {
  absl::MutexLock lock(&mu_);
  ++extra_;
}

void Executor::Impl::EndExtra(const absl::Status& s, const std::string& what) {
  absl::MutexLock lock(&mu_);
  --extra_;
  if (!s.ok() && error_.ok()) {
    error_ = absl::Status(s.code(), absl::StrCat("step ", step_, ": ", what, ": ", s.message()));
  }
}

void Executor::Impl::Record(int node, absl::Time start, bool comm, absl::Time end) {
  absl::MutexLock lock(&trace_mu_);
  trace_.push_back({node, comm, start, end});
}

// The persistent tensors of this process from options_.restore (constants
// aside, unless a step updates them), each checked against the graph's
// type of it.
absl::StatusOr<std::map<std::string, Tensor>> Executor::Impl::Restored() {
  std::set<std::string> updated;
  for (const auto& u : graph_.updates) updated.insert(u.target);
  std::set<std::string> names;
  for (const auto& dev : devices_) {
    for (const auto& [key, unused] : dev->persistent) {
      const std::string& name = graph_.tensors()[key.tensor].name;
      if (!graph_.constants.count(name) || updated.count(name)) names.insert(name);
    }
  }
  using Tensors = std::map<std::string, Tensor>;
  ASSIGN_OR_RETURN(Tensors out, options_.restore(names));
  for (const std::string& name : names) {
    auto it = out.find(name);
    if (it == out.end()) {
      return absl::NotFoundError("the state to restore holds no '" + name + "'");
    }
    const TensorInfo& info = *graph_.FindTensor(name);
    const std::vector<int64_t> dims = info.shape.Concrete(1);
    if (it->second.dtype() != info.dtype || it->second.dims() != dims) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the state to restore holds '", name, "' as ", it->second.TypeString(),
          ", the model has ", DTypeName(info.dtype), "[", absl::StrJoin(dims, ","), "]"));
    }
  }
  return out;
}

// The tensors every device is fed in `step`: per device, per feed.
absl::StatusOr<std::vector<std::vector<Tensor>>> Executor::Impl::Feeds(int64_t step) {
  std::vector<std::vector<Tensor>> out(devices_.size());
  // Each range's rows read once: every input and the label come together.
  std::map<std::pair<int64_t, int64_t>, std::pair<std::vector<Tensor>, Tensor>> read;
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (const auto& r : devices_[d]->feeds) {
      const auto input = std::find(input_names_.begin(), input_names_.end(), r.tensor());
      if (input == input_names_.end() && r.tensor() != label_name_) {
        return absl::InvalidArgumentError("device " + devices_[d]->id + " is fed '" + r.tensor() +
                                          "', which is neither a data input nor the label");
      }
      auto [it, fresh] = read.try_emplace({r.begin(), r.end()});
      if (fresh) {
        RETURN_IF_ERROR(data_->Batch((step - 1) * batch_ + r.begin(), r.end() - r.begin(),
                                     &it->second.first, &it->second.second));
      }
      out[d].push_back(input == input_names_.end()
                           ? it->second.second
                           : it->second.first[input - input_names_.begin()]);
    }
  }
  return out;
}

namespace {

// Reads step k + 1's data on one thread of its own while step k runs (a
// thread per step cost a thread creation on every step's critical path).
class Prefetcher {
 public:
  using FeedSet = absl::StatusOr<std::vector<std::vector<Tensor>>>;
  explicit Prefetcher(std::function<FeedSet(int64_t)> read)
      : read_(std::move(read)), thread_([this] { Loop(); }) {}
  ~Prefetcher() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  // Starts reading `step`'s data.
  void Request(int64_t step) {
    absl::MutexLock lock(&mu_);
    wanted_ = step;
  }
  // The data of the step last requested, once read.
  FeedSet Take() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Prefetcher* p)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->ready_ == p->wanted_; },
        this));
    return std::move(result_);
  }

 private:
  void Loop() {
    for (;;) {
      int64_t step = 0;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Prefetcher* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
              return p->stop_ || p->wanted_ != p->ready_;
            },
            this));
        if (stop_) return;
        step = wanted_;
      }
      FeedSet result = read_(step);
      absl::MutexLock lock(&mu_);
      result_ = std::move(result);
      ready_ = step;
    }
  }

  std::function<FeedSet(int64_t)> read_;
  absl::Mutex mu_;
  int64_t wanted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ready_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  FeedSet result_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

absl::Status Executor::Impl::Run() {
  // The next step's data is read while this step runs.
  Prefetcher prefetch([this](int64_t step) { return Feeds(options_.steps_before + step); });
  prefetch.Request(1);
  absl::Time previous_end = absl::Now();
  for (int64_t step = 1; step <= options_.steps; ++step) {
    // A step's time counts from the previous step's end, so a wait for
    // data is part of it.
    const absl::Time start = previous_end;
    Prefetcher::FeedSet feeds = prefetch.Take();
    if (!feeds.ok()) return feeds.status();
    step_ = step;
    // The previous step's tensors are freed, and the next step's data
    // requested, once this step runs: neither delays its start.
    std::vector<Tensor> previous;
    for (size_t d = 0; d < devices_.size(); ++d) {
      Device& dev = *devices_[d];
      for (Tensor& t : dev.store.Retain(dev.persistent)) previous.push_back(std::move(t));
      for (size_t i = 0; i < dev.feeds.size(); ++i) {
        const auto& r = dev.feeds[i];
        dev.store.Put(InstanceKey{tensor_ids_.at(r.tensor()), r.begin(), r.end()},
                      std::move((*feeds)[d][i]));
      }
      dev.store.ResetPeak();
    }
    std::vector<int> ready;
    {
      absl::MutexLock lock(&mu_);
      error_ = absl::OkStatus();
      remaining_ = static_cast<int>(nodes_.size());
      readers_left_ = readers_;
      instance_left_ = instance_waits_;
      commit_left_ = commit_waits_;
      extra_ = 0;
      posting_ = true;
      for (auto& dev : devices_) dev->busy_s = 0;
      for (size_t n = 0; n < nodes_.size(); ++n) {
        nodes_[n].pending = nodes_[n].deps;
        nodes_[n].finished = false;
        if (nodes_[n].deps == 0) ready.push_back(static_cast<int>(n));
      }
    }
    ServePulls();
    // Communication is posted before any kernel starts: a device thread
    // that starts first can hold the CPU for the whole forward pass where
    // this process has one, and a transfer the program has ready at the
    // step's start (a parameter another stage reads) would wait for it.
    // (The device threads wait for posting_ to clear, even for a kernel
    // made ready by a receive that lands meanwhile.)
    for (int n : ready) {
      if (!nodes_[n].compute) Dispatch(n);
    }
    {
      absl::MutexLock lock(&mu_);
      posting_ = false;
      for (int n : ready) {
        if (nodes_[n].compute)
          devices_[nodes_[n].device]->ready.push({nodes_[n].ins->priority(), -n});
      }
    }
    previous.clear();
    if (step < options_.steps) prefetch.Request(step + 1);
    const absl::Time deadline = start + options_.step_timeout;
    absl::Status failed;
    {
      absl::MutexLock lock(&mu_);
      auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (remaining_ == 0 && extra_ == 0) || (!error_.ok() && running_ == 0);
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&finished), deadline)) {
        std::vector<std::string> waiting;
        for (size_t n = 0; n < nodes_.size() && waiting.size() < 3; ++n) {
          if (!nodes_[n].finished && nodes_[n].pending == 0)
            waiting.push_back(Describe(static_cast<int>(n)));
        }
        if (error_.ok()) {
          error_ = absl::DeadlineExceededError(absl::StrCat(
              "step ", step, " did not finish within ", absl::FormatDuration(options_.step_timeout),
              waiting.empty() ? "" : "; waiting on " + absl::StrJoin(waiting, "; ")));
        }
      }
      failed = error_;
    }
    if (!failed.ok()) {
      transport_->CancelAll();
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Impl* i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(i->mu_) { return i->running_ == 0; }, this));
      for (auto& dev : devices_) {
        while (!dev->ready.empty()) dev->ready.pop();
      }
      return failed;
    }
    // The step succeeded: apply the updates not committed during it (those
    // chained to another; executor_lifetimes.cc).
    ExecutorStep report;
    report.step = step;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& dev : devices_)
        report.compute_time_s = std::max(report.compute_time_s, dev->busy_s);
    }
    for (auto& dev : devices_)
      report.peak_bytes = std::max(report.peak_bytes, dev->store.ResetPeak());
    for (auto& dev : devices_) {
      if (loss_tensor_ < 0) break;
      if (dev->loss_copy) continue;  // another device reports this whole loss
      for (const auto& [key, value] : dev->store.Instances(loss_tensor_)) {
        if (value.dtype() == DType::kF32 && value.numel() == 1) {
          report.loss_part += value.f32()[0];
          report.has_loss = true;
        }
      }
    }
    if (report.has_loss && !std::isfinite(report.loss_part) && !options_.timing_only) {
      // Parameters that took this step's update would be NaN from now on:
      // the run ends, and nothing of this step is written out.
      return absl::FailedPreconditionError(absl::StrCat(
          "the loss is ", report.loss_part, " at step ", step,
          " (nothing of this step is kept): the data holds non-finite values or the learning "
          "rate is too high"));
    }
    for (auto& dev : devices_) {
      if (options_.timing_only) break;
      // Read before any is written: an update's target may be another's
      // source.
      std::vector<std::vector<std::pair<InstanceKey, Tensor>>> sources;
      sources.reserve(update_ids_.size());
      for (const auto& [src, dst] : update_ids_) sources.push_back(dev->store.Instances(src));
      for (size_t u = 0; u < update_ids_.size(); ++u) {
        for (const auto& [key, value] : sources[u]) {
          dev->store.Put(InstanceKey{update_ids_[u].second, key.begin, key.end}, value);
        }
      }
    }
    previous_end = absl::Now();
    report.step_time_s = absl::ToDoubleSeconds(previous_end - start);
    steps_.push_back(report);
    if (options_.on_step) RETURN_IF_ERROR(options_.on_step(report));
  }
  return absl::OkStatus();
}

// --- Executor --------------------------------------------------------------

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(quilt::v1::DistributedProgram program,
                                                           std::vector<std::string> world, int rank,
                                                           Transport* transport, Dataset* data,
                                                           ExecutorOptions options) {
  auto impl = std::make_unique<Impl>(std::move(program), std::move(world), rank, transport, data,
                                     std::move(options));
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

absl::Status Executor::Run() { return impl_->Run(); }

void Executor::Stop() { impl_->StopThreads(); }

std::vector<HeldTensor> Executor::Persistent() const {
  std::vector<HeldTensor> out;
  for (const auto& dev : impl_->devices_) {
    for (const auto& [key, value] : dev->store.All()) {
      if (!dev->persistent.contains(key)) continue;
      out.push_back({dev->id, impl_->graph_.tensors()[key.tensor].name, key.begin, key.end, value});
    }
  }
  std::sort(out.begin(), out.end(), [](const HeldTensor& a, const HeldTensor& b) {
    return std::tie(a.device, a.tensor, a.begin) < std::tie(b.device, b.tensor, b.begin);
  });
  return out;
}

const std::vector<ExecutorStep>& Executor::steps() const { return impl_->steps_; }

std::vector<TraceEvent> Executor::Trace() const {
  const Impl& m = *impl_;
  absl::MutexLock lock(&m.trace_mu_);
  std::vector<TraceEvent> out;
  out.reserve(m.trace_.size());
  for (const Impl::Span& s : m.trace_) {
    TraceEvent e;
    const quilt::v1::Instruction& ins = *m.nodes_[s.node].ins;
    e.name = ins.has_compute() ? ins.compute().op() : m.Describe(s.node);
    e.category = s.comm ? "comm" : "compute";
    e.lane = m.nodes_[s.node].device + (s.comm ? static_cast<int>(m.devices_.size()) : 0);
    e.start_s = absl::ToDoubleSeconds(s.start - m.trace_origin_);
    e.duration_s = absl::ToDoubleSeconds(s.end - s.start);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> Executor::TraceLanes() const {
  std::vector<std::string> out;
  for (const auto& d : impl_->devices_) out.push_back(d->id + " compute");
  for (const auto& d : impl_->devices_) out.push_back(d->id + " communication");
  return out;
}

}  // namespace quilt
