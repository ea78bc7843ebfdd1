// Optimizer update ops (PyTorch semantics). They are functional: the new
// parameter and state are outputs, and the graph's state updates copy them
// back after the step.
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::Status InferUpdate(InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloatInputs(ctx));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.shape(i) != ctx.shape(0)) {
      return ctx.Error(absl::StrCat("input ", i, " ", ctx.shape(i).ToString(),
                                    " does not match the parameter ", ctx.shape(0).ToString()));
    }
  }
  if (ctx.shape(0).HasBatch()) return ctx.Error("a parameter cannot carry the batch");
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.input(0));
  return absl::OkStatus();
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "SgdUpdate";
  s.doc =
      "SGD step. Inputs param, grad, [velocity]; outputs param', [velocity']. Attributes "
      "lr, momentum, weight_decay, nesterov: g += wd·p; v = m·v + g; p -= lr·(nesterov ? "
      "g + m·v : v) (v = g without momentum).";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.min_outputs = 1;
  s.max_outputs = 2;
  s.is_update = true;
  s.infer = [](InferContext& ctx) -> absl::Status {
    if ((ctx.num_inputs() == 3) != (ctx.num_outputs() == 2)) {
      return ctx.Error("the velocity input and output come together");
    }
    return InferUpdate(ctx);
  };
  s.cost = ElementwiseCost(4);
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "AdamUpdate";
  s.doc =
      "Adam step (bias-corrected; the step number comes from the runtime). Inputs param, "
      "grad, m, v; outputs param', m', v'. Attributes lr, beta1, beta2, epsilon, "
      "weight_decay (L2 added to the gradient).";
  s.min_inputs = s.max_inputs = 4;
  s.min_outputs = s.max_outputs = 3;
  s.is_update = true;
  s.infer = InferUpdate;
  s.cost = ElementwiseCost(12);
  return s;
}());

}  // namespace
}  // namespace quilt::ops
