#include "src/graph/graph.h"

#include <queue>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/batch_layout.h"

namespace quilt {

const char* TensorRoleName(TensorRole r) {
  switch (r) {
    case TensorRole::kActivation:
      return "activation";
    case TensorRole::kParameter:
      return "parameter";
    case TensorRole::kInput:
      return "input";
    case TensorRole::kLabel:
      return "label";
    case TensorRole::kGradient:
      return "gradient";
    case TensorRole::kOptimizerState:
      return "optimizer_state";
    case TensorRole::kConstant:
      return "constant";
    case TensorRole::kLoss:
      return "loss";
  }
  return "?";
}

absl::Status Graph::AddTensor(TensorInfo info) {
  if (info.name.empty()) return absl::InvalidArgumentError("tensor with an empty name");
  if (index_.count(info.name)) {
    return absl::AlreadyExistsError(absl::StrCat("tensor '", info.name, "' is defined twice"));
  }
  index_[info.name] = tensors_.size();
  tensors_.push_back(std::move(info));
  return absl::OkStatus();
}

const TensorInfo* Graph::FindTensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

TensorInfo* Graph::MutableTensor(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const Op* Graph::FindOp(const std::string& name) const {
  for (const Op& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

const ParameterSpec* Graph::FindParameter(const std::string& tensor) const {
  for (const ParameterSpec& p : parameters) {
    if (p.tensor == tensor) return &p;
  }
  return nullptr;
}

ParameterSpec* Graph::FindParameter(const std::string& tensor) {
  return const_cast<ParameterSpec*>(std::as_const(*this).FindParameter(tensor));
}

std::map<std::string, int> Graph::Producers() const {
  std::map<std::string, int> producers;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const std::string& out : ops[i].outputs) producers[out] = static_cast<int>(i);
  }
  return producers;
}

absl::StatusOr<std::vector<int>> Graph::TopologicalOrder() const {
  const std::map<std::string, int> producers = Producers();
  std::set<std::string> sources(inputs.begin(), inputs.end());
  sources.insert(labels.begin(), labels.end());
  for (const ParameterSpec& p : parameters) sources.insert(p.tensor);
  for (const auto& [name, value] : constants) sources.insert(name);
  for (const TensorInfo& t : tensors_) {
    if (t.role == TensorRole::kOptimizerState || t.role == TensorRole::kParameter ||
        t.role == TensorRole::kConstant) {
      sources.insert(t.name);
    }
  }
  const int n = static_cast<int>(ops.size());
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> consumers(n);
  for (int i = 0; i < n; ++i) {
    std::set<int> deps;
    for (const std::string& in : ops[i].inputs) {
      if (in.empty()) continue;
      auto it = producers.find(in);
      if (it != producers.end()) {
        deps.insert(it->second);
      } else if (!sources.count(in)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op '", ops[i].name, "' (", ops[i].type, ") reads tensor '", in,
            "', which no op produces and which is not an input, label, parameter or constant"));
      }
    }
    pending[i] = static_cast<int>(deps.size());
    for (int d : deps) consumers[d].push_back(i);
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int c : consumers[i]) {
      if (--pending[c] == 0) ready.push(c);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    for (int i = 0; i < n; ++i) {
      if (pending[i] > 0) {
        return absl::InvalidArgumentError(absl::StrCat("the graph has a cycle through op '",
                                                       ops[i].name, "' (", ops[i].type, ")"));
      }
    }
  }
  return order;
}

int64_t Graph::ParameterCount() const {
  int64_t n = 0;
  for (const ParameterSpec& p : parameters) {
    if (p.frozen) continue;
    const TensorInfo* t = FindTensor(p.tensor);
    if (t != nullptr) n += t->shape.NumElements(1);
  }
  return n;
}

namespace {

quilt::v1::TensorRole RoleToProto(TensorRole r) {
  switch (r) {
    case TensorRole::kActivation:
      return quilt::v1::TENSOR_ROLE_ACTIVATION;
    case TensorRole::kParameter:
      return quilt::v1::TENSOR_ROLE_PARAMETER;
    case TensorRole::kInput:
      return quilt::v1::TENSOR_ROLE_INPUT;
    case TensorRole::kLabel:
      return quilt::v1::TENSOR_ROLE_LABEL;
    case TensorRole::kGradient:
      return quilt::v1::TENSOR_ROLE_GRADIENT;
    case TensorRole::kOptimizerState:
      return quilt::v1::TENSOR_ROLE_OPTIMIZER_STATE;
    case TensorRole::kConstant:
      return quilt::v1::TENSOR_ROLE_CONSTANT;
    case TensorRole::kLoss:
      return quilt::v1::TENSOR_ROLE_LOSS;
  }
  return quilt::v1::TENSOR_ROLE_UNSPECIFIED;
}

absl::StatusOr<TensorRole> RoleFromProto(quilt::v1::TensorRole r) {
  switch (r) {
    case quilt::v1::TENSOR_ROLE_ACTIVATION:
    case quilt::v1::TENSOR_ROLE_UNSPECIFIED:
      return TensorRole::kActivation;
    case quilt::v1::TENSOR_ROLE_PARAMETER:
      return TensorRole::kParameter;
    case quilt::v1::TENSOR_ROLE_INPUT:
      return TensorRole::kInput;
    case quilt::v1::TENSOR_ROLE_LABEL:
      return TensorRole::kLabel;
    case quilt::v1::TENSOR_ROLE_GRADIENT:
      return TensorRole::kGradient;
    case quilt::v1::TENSOR_ROLE_OPTIMIZER_STATE:
      return TensorRole::kOptimizerState;
    case quilt::v1::TENSOR_ROLE_CONSTANT:
      return TensorRole::kConstant;
    case quilt::v1::TENSOR_ROLE_LOSS:
      return TensorRole::kLoss;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown tensor role ", r));
  }
}

}  // namespace

quilt::v1::TrainingGraph Graph::ToProto() const {
  quilt::v1::TrainingGraph g;
  g.set_name(name);
  for (const TensorInfo& t : tensors_) {
    quilt::v1::TensorDef* d = g.add_tensors();
    d->set_name(t.name);
    d->set_dtype(quilt::ToProto(t.dtype));
    d->set_role(RoleToProto(t.role));
    for (const Dim& dim : t.shape.dims()) {
      quilt::v1::Dim* pd = d->mutable_shape()->add_dims();
      if (dim.batch) {
        pd->set_batch_multiple(dim.value);
      } else {
        pd->set_size(dim.value);
      }
    }
  }
  for (const Op& op : ops) {
    quilt::v1::OpDef* d = g.add_ops();
    d->set_name(op.name);
    d->set_type(op.type);
    for (const auto& i : op.inputs) d->add_inputs(i);
    for (const auto& o : op.outputs) d->add_outputs(o);
    op.attrs.ToProto(d->mutable_attrs());
    d->set_forward_op(op.forward_op);
  }
  for (const ParameterSpec& p : parameters) {
    quilt::v1::Parameter* d = g.add_parameters();
    d->set_tensor(p.tensor);
    d->set_frozen(p.frozen);
    if (p.value.has_value()) {
      *d->mutable_value() = p.value->ToProto();
    } else {
      quilt::v1::Initializer* i = d->mutable_initializer();
      i->set_kind(static_cast<quilt::v1::Initializer::Kind>(static_cast<int>(p.init.kind) + 1));
      i->set_value(p.init.value);
      i->set_low(p.init.low);
      i->set_high(p.init.high);
      i->set_mean(p.init.mean);
      i->set_stddev(p.init.stddev);
      i->set_seed(p.init.seed);
    }
  }
  for (const auto& [n, value] : constants) {
    quilt::v1::NamedTensor* c = g.add_constants();
    c->set_name(n);
    *c->mutable_value() = value.ToProto();
  }
  for (const auto& i : inputs) g.add_inputs(i);
  for (const auto& l : labels) g.add_labels(l);
  for (const auto& o : outputs) g.add_outputs(o);
  if (loss.type != LossType::kNone) {
    g.mutable_loss()->set_type(loss.type == LossType::kMse ? quilt::v1::Loss::TYPE_MSE
                               : loss.type == LossType::kModel
                                   ? quilt::v1::Loss::TYPE_MODEL
                                   : quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY);
    g.mutable_loss()->set_prediction(loss.prediction);
    g.mutable_loss()->set_label(loss.label);
    g.mutable_loss()->set_output(loss.output);
  }
  if (optimizer.kind == OptimizerSpec::Kind::kSgd) {
    auto* s = g.mutable_optimizer()->mutable_sgd();
    s->set_learning_rate(optimizer.learning_rate);
    s->set_momentum(optimizer.momentum);
    s->set_weight_decay(optimizer.weight_decay);
    s->set_nesterov(optimizer.nesterov);
  } else if (optimizer.kind == OptimizerSpec::Kind::kAdam) {
    auto* a = g.mutable_optimizer()->mutable_adam();
    a->set_learning_rate(optimizer.learning_rate);
    a->set_beta1(optimizer.beta1);
    a->set_beta2(optimizer.beta2);
    a->set_epsilon(optimizer.epsilon);
    a->set_weight_decay(optimizer.weight_decay);
  }
  g.set_has_backward(has_backward);
  g.set_reference_batch_size(reference_batch);
  for (const StateUpdate& u : updates) {
    quilt::v1::StateUpdate* d = g.add_updates();
    d->set_target(u.target);
    d->set_source(u.source);
  }
  return g;
}

absl::StatusOr<Graph> Graph::FromProto(const quilt::v1::TrainingGraph& proto, Read read) {
  Graph g;
  g.name = proto.name();
  for (const quilt::v1::TensorDef& d : proto.tensors()) {
    TensorInfo t;
    t.name = d.name();
    absl::StatusOr<DType> dtype = quilt::FromProto(d.dtype());
    if (!dtype.ok()) return Annotate(dtype.status(), "tensor '" + d.name() + "'");
    t.dtype = *dtype;
    ASSIGN_OR_RETURN(t.role, RoleFromProto(d.role()));
    std::vector<Dim> dims;
    for (const quilt::v1::Dim& pd : d.shape().dims()) {
      if (pd.value_case() == quilt::v1::Dim::kBatchMultiple) {
        if (pd.batch_multiple() < 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor '", d.name(), "': batch_multiple must be >= 1, got ", pd.batch_multiple()));
        }
        dims.push_back(Dim::Batch(pd.batch_multiple()));
      } else {
        if (pd.size() < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor '", d.name(), "' has a negative dimension ", pd.size()));
        }
        dims.push_back(Dim::Fixed(pd.size()));
      }
    }
    t.shape = Shape(std::move(dims));
    RETURN_IF_ERROR(g.AddTensor(std::move(t)));
  }
  for (const quilt::v1::OpDef& d : proto.ops()) {
    Op op;
    op.name = d.name();
    op.type = d.type();
    op.inputs.assign(d.inputs().begin(), d.inputs().end());
    op.outputs.assign(d.outputs().begin(), d.outputs().end());
    absl::StatusOr<Attrs> attrs = Attrs::FromProto(d.attrs());
    if (!attrs.ok()) return Annotate(attrs.status(), "op '" + d.name() + "'");
    op.attrs = std::move(*attrs);
    op.forward_op = d.forward_op();
    g.ops.push_back(std::move(op));
  }
  for (const quilt::v1::Parameter& d : proto.parameters()) {
    ParameterSpec p;
    p.tensor = d.tensor();
    p.frozen = d.frozen();
    if (d.has_value()) {
      if (read == Read::kWhole) {
        ASSIGN_OR_RETURN(Tensor v, Tensor::FromProto(d.value()));
        p.value = std::move(v);
      }
    } else if (d.has_initializer()) {
      const quilt::v1::Initializer& i = d.initializer();
      if (i.kind() == quilt::v1::Initializer::KIND_UNSPECIFIED) {
        return absl::InvalidArgumentError("parameter '" + d.tensor() + "' has no initializer kind");
      }
      if (!quilt::v1::Initializer::Kind_IsValid(i.kind())) {
        return absl::InvalidArgumentError(absl::StrCat("parameter '", d.tensor(),
                                                       "' has an unknown initializer kind ",
                                                       static_cast<int>(i.kind())));
      }
      p.init.kind = static_cast<InitializerSpec::Kind>(static_cast<int>(i.kind()) - 1);
      p.init.value = i.value();
      p.init.low = i.low();
      p.init.high = i.high();
      p.init.mean = i.mean();
      p.init.stddev = i.stddev();
      p.init.seed = i.seed();
    } else {
      return absl::InvalidArgumentError("parameter '" + d.tensor() +
                                        "' has neither a value nor an initializer");
    }
    g.parameters.push_back(std::move(p));
  }
  for (const quilt::v1::NamedTensor& c : proto.constants()) {
    if (read == Read::kStructure) break;
    ASSIGN_OR_RETURN(Tensor v, Tensor::FromProto(c.value()));
    g.constants[c.name()] = std::move(v);
  }
  g.inputs.assign(proto.inputs().begin(), proto.inputs().end());
  g.labels.assign(proto.labels().begin(), proto.labels().end());
  g.outputs.assign(proto.outputs().begin(), proto.outputs().end());
  if (proto.has_loss()) {
    switch (proto.loss().type()) {
      case quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY:
        g.loss.type = LossType::kSoftmaxCrossEntropy;
        break;
      case quilt::v1::Loss::TYPE_MSE:
        g.loss.type = LossType::kMse;
        break;
      case quilt::v1::Loss::TYPE_MODEL:
        g.loss.type = LossType::kModel;
        if (proto.loss().output().empty()) {
          return absl::InvalidArgumentError("the model's own loss names no output tensor");
        }
        break;
      default:
        return absl::InvalidArgumentError("loss has no type");
    }
    g.loss.prediction = proto.loss().prediction();
    g.loss.label = proto.loss().label();
    g.loss.output = proto.loss().output();
  }
  g.optimizer = OptimizerFromProto(proto.optimizer());
  g.has_backward = proto.has_backward();
  g.reference_batch = proto.reference_batch_size();
  for (const quilt::v1::StateUpdate& u : proto.updates()) {
    g.updates.push_back({u.target(), u.source()});
  }
  // Every parameter tensor gets its values from a parameter entry, and
  // every entry is of a parameter tensor.
  for (const ParameterSpec& p : g.parameters) {
    const TensorInfo* t = g.FindTensor(p.tensor);
    if (t == nullptr || t->role != TensorRole::kParameter) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a parameters entry names '", p.tensor, "', which is ",
          t == nullptr ? "no tensor of the graph" : "not a tensor of the parameter role"));
    }
  }
  for (const TensorInfo& t : g.tensors()) {
    if (t.role == TensorRole::kParameter && g.FindParameter(t.name) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name,
                       "' is a parameter, but no parameters entry gives it a value or an "
                       "initializer"));
    }
  }
  MarkInterleavedBatches(&g);
  return g;
}

}  // namespace quilt

namespace quilt {

OptimizerSpec OptimizerFromProto(const quilt::v1::Optimizer& proto) {
  OptimizerSpec o;
  if (proto.has_sgd()) {
    const auto& s = proto.sgd();
    o.kind = OptimizerSpec::Kind::kSgd;
    o.learning_rate = s.learning_rate();
    o.momentum = s.momentum();
    o.weight_decay = s.weight_decay();
    o.nesterov = s.nesterov();
  } else if (proto.has_adam()) {
    const auto& a = proto.adam();
    o.kind = OptimizerSpec::Kind::kAdam;
    o.learning_rate = a.learning_rate();
    o.beta1 = a.beta1() == 0 ? 0.9 : a.beta1();
    o.beta2 = a.beta2() == 0 ? 0.999 : a.beta2();
    o.epsilon = a.epsilon() == 0 ? 1e-8 : a.epsilon();
    o.weight_decay = a.weight_decay();
  }
  return o;
}

absl::Status CheckGlobalBatch(int64_t batch) {
  if (batch <= kMaxGlobalBatch) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a global batch of ", batch, " is more than the ",
                                                 kMaxGlobalBatch, " samples a step may have"));
}

}  // namespace quilt
