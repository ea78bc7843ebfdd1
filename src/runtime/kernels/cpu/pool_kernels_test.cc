// Max pooling against a plain reference where a window hangs over the
// input's edge (ceil_mode with odd sizes): 2×2 windows of stride 2 take the
// fast path only where every window lies inside the input.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/graph_builder.h"
#include "src/runtime/graph_runner.h"

namespace quilt {
namespace {

struct Pooled {
  Tensor y, dx;
};

// MaxPool 2×2 / 2 of x [n, c, h, w] and its gradient for dY = `dy`.
absl::StatusOr<Pooled> RunMaxPool(const Tensor& x, const Tensor& dy, bool ceil_mode) {
  Graph g;
  GraphBuilder b(&g);
  const auto batched = [](const std::vector<int64_t>& d) {  // [B, c, h, w]
    std::vector<Dim> dims = {Dim::Batch(1)};
    for (size_t i = 1; i < d.size(); ++i) dims.push_back(Dim::Fixed(d[i]));
    return Shape(dims);
  };
  ASSIGN_OR_RETURN(std::string xi, b.AddInput("x", DType::kF32, batched(x.dims())));
  ASSIGN_OR_RETURN(std::string dyi, b.AddInput("dy", DType::kF32, batched(dy.dims())));
  Attrs a;
  a.SetInts("kernel_shape", {2, 2});
  a.SetInts("strides", {2, 2});
  a.SetInt("ceil_mode", ceil_mode ? 1 : 0);
  ASSIGN_OR_RETURN(std::string y, b.Add("MaxPool", {xi}, a, "pool"));
  EncodeShape(&a, "input_shape", batched(x.dims()));
  ASSIGN_OR_RETURN(std::string dx, b.Add("MaxPoolGrad", {dyi, xi}, a, "pool_grad"));
  ASSIGN_OR_RETURN(std::unique_ptr<GraphRunner> runner, GraphRunner::Create(g, {}));
  ASSIGN_OR_RETURN(auto out, runner->Evaluate({{xi, x}, {dyi, dy}}, {y, dx}));
  return Pooled{out.at(y), out.at(dx)};
}

TEST(MaxPool, WindowsOverTheEdge_SeeOnlyTheInput) {
  for (const auto& [h, w, ceil_mode] : {std::tuple{5, 7, true}, std::tuple{4, 5, true},
                                        std::tuple{5, 7, false}, std::tuple{4, 6, false}}) {
    const int64_t n = 2, c = 3;
    const int64_t ho = ceil_mode ? (h + 1) / 2 : h / 2, wo = ceil_mode ? (w + 1) / 2 : w / 2;
    std::vector<float> xv(n * c * h * w), dyv(n * c * ho * wo);
    // Distinct values, largest at the last row and column of each plane:
    // a window reading past its row or plane would find larger ones.
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37 * static_cast<double>(i)) - 2.0;
    for (int64_t p = 0; p < n * c; ++p) xv[(p + 1) * h * w - 1] = 10.0f + p;
    for (size_t i = 0; i < dyv.size(); ++i) dyv[i] = 1.0f + static_cast<float>(i);
    auto got = RunMaxPool(Tensor::FromF32({n, c, h, w}, xv), Tensor::FromF32({n, c, ho, wo}, dyv),
                          ceil_mode);
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->y.dims(), (std::vector<int64_t>{n, c, ho, wo}));
    std::vector<float> dx(xv.size(), 0.0f);
    for (int64_t p = 0; p < n * c; ++p) {
      for (int64_t oy = 0; oy < ho; ++oy) {
        for (int64_t ox = 0; ox < wo; ++ox) {
          float best = -INFINITY;
          int64_t at = -1;
          for (int64_t iy = 2 * oy; iy < std::min<int64_t>(2 * oy + 2, h); ++iy) {
            for (int64_t ix = 2 * ox; ix < std::min<int64_t>(2 * ox + 2, w); ++ix) {
              const int64_t k = (p * h + iy) * w + ix;
              if (xv[k] > best) best = xv[k], at = k;
            }
          }
          const int64_t o = (p * ho + oy) * wo + ox;
          EXPECT_EQ(got->y.f32()[o], best)
              << h << "x" << w << " plane " << p << " at " << oy << "," << ox;
          dx[at] += dyv[o];
        }
      }
    }
    for (size_t i = 0; i < dx.size(); ++i) {
      EXPECT_EQ(got->dx.f32()[i], dx[i]) << h << "x" << w << " element " << i;
    }
  }
}

}  // namespace
}  // namespace quilt
