// CPU kernels of MatMul and Gemm on OpenBLAS SGEMM.
#include <cstring>

#include "src/common/status.h"
#include "src/runtime/kernels/cpu/gemm.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

absl::Status MatMul(KernelContext& ctx) {
  const bool ta = ctx.attrs().Int("trans_a") != 0;
  const bool tb = ctx.attrs().Int("trans_b") != 0;
  std::vector<int64_t> da = ctx.in(0).dims(), db = ctx.in(1).dims();
  if (da.size() == 1) da.insert(da.begin(), 1);
  if (db.size() == 1) db.push_back(1);
  const int ra = static_cast<int>(da.size()), rb = static_cast<int>(db.size());
  const int64_t m = ta ? da[ra - 1] : da[ra - 2];
  const int64_t k = ta ? da[ra - 2] : da[ra - 1];
  const int64_t n = tb ? db[rb - 2] : db[rb - 1];
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const float* a = ctx.in(0).f32();
  const float* b = ctx.in(1).f32();
  float* c = out->f32();
  std::vector<int64_t> lead_a(da.begin(), da.end() - 2), lead_b(db.begin(), db.end() - 2);
  // Leading dims of the output (before M, N).
  std::vector<int64_t> lead_o(std::max(lead_a.size(), lead_b.size()), 1);
  for (size_t i = 0; i < lead_o.size(); ++i) {
    const int ia = static_cast<int>(i) - static_cast<int>(lead_o.size() - lead_a.size());
    const int ib = static_cast<int>(i) - static_cast<int>(lead_o.size() - lead_b.size());
    lead_o[i] = std::max(ia >= 0 ? lead_a[ia] : 1, ib >= 0 ? lead_b[ib] : 1);
  }
  const int64_t batches = Numel(lead_o);
  if (lead_b.empty() || Numel(lead_b) == 1) {
    if (!ta) {
      // All of A's rows against one B: a single GEMM.
      Sgemm(false, tb, batches * m, n, k, 1.0f, a, b, 0.0f, c);
      return absl::OkStatus();
    }
  }
  const std::vector<int64_t> sa = BroadcastStrides(lead_a, lead_o);
  const std::vector<int64_t> sb = BroadcastStrides(lead_b, lead_o);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t oa = 0, ob = 0, rem = bi;
    for (int d = static_cast<int>(lead_o.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % lead_o[d];
      rem /= lead_o[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    Sgemm(ta, tb, m, n, k, 1.0f, a + oa * m * k, b + ob * k * n, 0.0f, c + bi * m * n);
  }
  return absl::OkStatus();
}

absl::Status Gemm(KernelContext& ctx) {
  const bool ta = ctx.attrs().Int("transA") != 0;
  const bool tb = ctx.attrs().Int("transB") != 0;
  const float alpha = static_cast<float>(ctx.attrs().Float("alpha", 1.0));
  const float beta = static_cast<float>(ctx.attrs().Float("beta", 1.0));
  const auto& da = ctx.in(0).dims();
  const auto& db = ctx.in(1).dims();
  const int64_t m = ta ? da[1] : da[0], k = ta ? da[0] : da[1], n = tb ? db[0] : db[1];
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  float gemm_beta = 0.0f;
  if (ctx.has_input(2) && beta != 0.0f) {
    std::vector<float> zero(1, 0.0f);
    BroadcastBinary(ctx.in(2).f32(), ctx.in(2).dims(), zero.data(), {}, out->f32(), out->dims(),
                    [beta](float x, float) { return beta * x; });
    gemm_beta = 1.0f;
  }
  Sgemm(ta, tb, m, n, k, alpha, ctx.in(0).f32(), ctx.in(1).f32(), gemm_beta, out->f32());
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "MatMul", MatMul);
QUILT_REGISTER_KERNEL("cpu", "Gemm", Gemm);

}  // namespace
}  // namespace quilt::cpu
