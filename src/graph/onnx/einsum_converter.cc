// Einsum (torch.einsum), as the ops it is made of: sums over letters only
// one operand has, then for each further operand, left to right, a
// batched MatMul — each side transposed to [shared..., own...,
// contracted...] and reshaped to [shared..., own, contracted] — reshaped
// back; at the end, transposed to the output's order. An ellipsis stands
// for the dims the letters leave. Repeated letters within an operand
// (diagonals) are refused.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

// An ellipsis' dims are named '0', '1', … here (letters are the user's).
char EllipsisDim(int i) { return static_cast<char>('0' + i); }
bool Letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// An operand's letters, its ellipsis expanded to EllipsisDim(0), ….
absl::StatusOr<std::string> Expand(const std::string& term, int rank, int* ellipsis_rank) {
  const size_t dots = term.find("...");
  std::string letters = term;
  if (dots != std::string::npos) letters.erase(dots, 3);
  for (char c : letters) {
    if (!Letter(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Einsum: '", std::string(1, c), "' (only letters and ...)"));
    }
  }
  if (dots == std::string::npos) {
    if (static_cast<int>(letters.size()) != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("Einsum: '", term, "' names ", letters.size(), " dims of ", rank));
    }
    return letters;
  }
  const int extra = rank - static_cast<int>(letters.size());
  if (extra < 0) return absl::InvalidArgumentError("Einsum: more letters than dims");
  if (extra > 10) return absl::InvalidArgumentError("Einsum: an ellipsis of more than 10 dims");
  if (*ellipsis_rank >= 0 && *ellipsis_rank != extra) {
    return absl::InvalidArgumentError("Einsum: ellipses of different ranks (broadcast)");
  }
  *ellipsis_rank = extra;
  std::string fill;
  for (int i = 0; i < extra; ++i) fill += EllipsisDim(i);
  return term.substr(0, dots) + fill + term.substr(dots + 3);
}

struct Operand {
  std::string tensor;
  std::string letters;
  Shape shape;
};

class Builder {
 public:
  Builder(ImportContext& ctx, std::string at) : ctx_(ctx), at_(std::move(at)) {}

  absl::StatusOr<std::string> Op(const std::string& type, std::vector<std::string> in, Attrs a,
                                 const std::string& hint) {
    return ctx_.b().Add(type, std::move(in), std::move(a), absl::StrCat(at_, "/", hint, n_++));
  }

  // Sums `x` over the letters not in `keep`.
  absl::Status SumOut(Operand* x, const std::string& keep) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t i = 0; i < x->letters.size(); ++i) {
      if (keep.find(x->letters[i]) == std::string::npos) {
        axes.push_back(static_cast<int64_t>(i));
      } else {
        kept += x->letters[i];
      }
    }
    if (axes.empty()) return absl::OkStatus();
    for (int64_t a : axes) {
      if (x->shape.dim(static_cast<int>(a)).batch) {
        return absl::InvalidArgumentError("Einsum sums over the batch dim");
      }
    }
    Attrs a;
    a.SetInts("axes", axes);
    a.SetInt("keepdims", 0);
    ASSIGN_OR_RETURN(x->tensor, Op("ReduceSum", {x->tensor}, std::move(a), "sum"));
    std::vector<Dim> dims;
    for (size_t i = 0; i < x->letters.size(); ++i) {
      if (keep.find(x->letters[i]) != std::string::npos) dims.push_back(x->shape.dim(i));
    }
    x->letters = kept;
    x->shape = Shape(dims);
    return absl::OkStatus();
  }

  // `x` with its dims in the order of `order` (a permutation of its letters).
  absl::Status Permute(Operand* x, const std::string& order) {
    if (order == x->letters) return absl::OkStatus();
    std::vector<int64_t> perm;
    std::vector<Dim> dims;
    for (char c : order) {
      const size_t i = x->letters.find(c);
      perm.push_back(static_cast<int64_t>(i));
      dims.push_back(x->shape.dim(static_cast<int>(i)));
    }
    Attrs a;
    a.SetInts("perm", perm);
    ASSIGN_OR_RETURN(x->tensor, Op("Transpose", {x->tensor}, std::move(a), "transpose"));
    x->letters = order;
    x->shape = Shape(dims);
    return absl::OkStatus();
  }

  // Reshapes `x` (letters in groups) to one dim per group.
  absl::StatusOr<std::string> Merge(const Operand& x, const std::vector<std::string>& groups) {
    std::vector<int64_t> target;
    for (const std::string& g : groups) {
      int64_t size = 1;
      bool batch = false;
      for (char c : g) {
        const Dim d = x.shape.dim(static_cast<int>(x.letters.find(c)));
        batch = batch || d.batch;
        size *= d.batch ? 1 : d.value;
      }
      target.push_back(batch ? -1 : size);
    }
    return ReshapeTo(ctx_, x.tensor, std::move(target), absl::StrCat(at_, "/merge", n_++));
  }

 private:
  ImportContext& ctx_;
  std::string at_;
  int n_ = 0;
};

bool Has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// x · y as one operand with the letters of either that are in `keep`:
// letters only one of them has and `keep` lacks are summed first; then a
// batched MatMul over [shared..., own, contracted], reshaped back to one
// dim per letter, [shared..., x's own..., y's own...].
absl::StatusOr<Operand> Contract(Builder& b, const std::string& equation, Operand x, Operand y,
                                 const std::string& keep, const std::map<char, Dim>& size) {
  RETURN_IF_ERROR(b.SumOut(&x, keep + y.letters));
  RETURN_IF_ERROR(b.SumOut(&y, keep + x.letters));
  std::string shared, left, right, contracted;
  for (char c : x.letters) {
    if (Has(y.letters, c)) {
      (Has(keep, c) ? shared : contracted) += c;
    } else {
      left += c;
    }
  }
  for (char c : y.letters) {
    if (!Has(x.letters, c)) right += c;
  }
  for (char c : contracted) {
    if (size.at(c).batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("Einsum '", equation, "' contracts over the batch dim"));
    }
  }
  RETURN_IF_ERROR(b.Permute(&x, shared + left + contracted));
  RETURN_IF_ERROR(b.Permute(&y, shared + contracted + right));
  std::vector<std::string> gx, gy;
  for (char c : shared) {
    gx.push_back(std::string(1, c));
    gy.push_back(std::string(1, c));
  }
  gx.push_back(left);
  gx.push_back(contracted);
  gy.push_back(contracted);
  gy.push_back(right);
  ASSIGN_OR_RETURN(std::string xm, b.Merge(x, gx));
  ASSIGN_OR_RETURN(std::string ym, b.Merge(y, gy));
  Operand result;
  ASSIGN_OR_RETURN(result.tensor, b.Op("MatMul", {xm, ym}, {}, "matmul"));
  result.letters = shared + left + right;
  std::vector<Dim> dims;
  for (char c : result.letters) dims.push_back(size.at(c));
  result.shape = Shape(dims);
  std::vector<std::string> each;
  for (char c : result.letters) each.push_back(std::string(1, c));
  ASSIGN_OR_RETURN(result.tensor, b.Merge(result, each));
  return result;
}

// out[o…] = Σ over the other letters of Π operands, on constants (every
// combination of the letters' values in turn: for small tables).
absl::Status FoldEinsum(ImportContext& ctx, const Node& node, const std::vector<Operand>& ops,
                        const std::vector<const Tensor*>& constants, const std::string& out,
                        const std::map<char, Dim>& size) {
  std::string letters;  // the output's first, then the summed ones
  letters = out;
  for (const auto& [c, d] : size) {
    if (out.find(c) == std::string::npos) letters += c;
  }
  std::vector<int64_t> extent;
  double combinations = 1;
  for (char c : letters) {
    extent.push_back(size.at(c).value);
    combinations *= static_cast<double>(size.at(c).value);
  }
  if (combinations > 5e7) {
    return absl::InvalidArgumentError(absl::StrCat("Einsum of constants over ", combinations,
                                                   " combinations (folded up to 5e7)"));
  }
  std::vector<int64_t> out_dims(extent.begin(), extent.begin() + static_cast<long>(out.size()));
  ASSIGN_OR_RETURN(Tensor result, Tensor::Zeros(DType::kF32, out_dims));
  // Per operand, the stride of each letter of `letters` in it (0: absent).
  std::vector<std::vector<int64_t>> strides;
  for (const Operand& x : ops) {
    std::vector<int64_t> st(letters.size(), 0);
    int64_t stride = 1;
    for (int k = static_cast<int>(x.letters.size()) - 1; k >= 0; --k) {
      st[letters.find(x.letters[static_cast<size_t>(k)])] = stride;
      stride *= x.shape.dim(k).value;
    }
    strides.push_back(std::move(st));
  }
  int64_t inner = 1;  // combinations of the summed letters per output element
  for (size_t k = out.size(); k < letters.size(); ++k) inner *= extent[k];
  std::vector<int64_t> idx(letters.size(), 0);
  for (int64_t n = 0; n < static_cast<int64_t>(combinations); ++n) {
    double term = 1;
    for (size_t o = 0; o < ops.size(); ++o) {
      int64_t at = 0;
      for (size_t k = 0; k < letters.size(); ++k) at += idx[k] * strides[o][k];
      term *= constants[o]->f32()[at];
    }
    result.f32()[inner == 0 ? 0 : n / inner] += static_cast<float>(term);
    for (int k = static_cast<int>(letters.size()) - 1; k >= 0 && ++idx[k] == extent[k]; --k) {
      idx[k] = 0;
    }
  }
  ctx.SetConstant(node.output(0), std::move(result));
  return absl::OkStatus();
}

}  // namespace

absl::Status Einsum(ImportContext& ctx, const Node& node) {
  std::string equation = AttrString(node, "equation", "");
  equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
  const size_t arrow = equation.find("->");
  const std::vector<std::string> terms = absl::StrSplit(equation.substr(0, arrow), ',');
  if (terms.size() != static_cast<size_t>(node.input_size()) || terms.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Einsum '", equation, "': ", node.input_size(),
                                                   " operands for ", terms.size(), " terms"));
  }
  // Of constants (torch.outer of positions and frequencies, rotary
  // tables): computed here.
  std::vector<const Tensor*> constants;
  for (int i = 0; i < node.input_size(); ++i) {
    const Tensor* c = ctx.ConstantInput(node, i);
    if (c == nullptr || ctx.IsParameterInitializer(node, i) || c->dtype() != DType::kF32) break;
    constants.push_back(c);
  }
  const bool fold = static_cast<int>(constants.size()) == node.input_size();
  std::vector<Operand> ops;
  int ellipsis_rank = -1;
  for (int i = 0; i < node.input_size(); ++i) {
    Operand x;
    if (fold) {
      x.shape = Shape::Fixed(constants[static_cast<size_t>(i)]->dims());
    } else {
      ASSIGN_OR_RETURN(x.tensor, ctx.Data(node, i));
      ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x.tensor));
      x.shape = t.shape;
    }
    ASSIGN_OR_RETURN(x.letters, Expand(terms[i], x.shape.rank(), &ellipsis_rank));
    for (char c : x.letters) {
      if (std::count(x.letters.begin(), x.letters.end(), c) > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("Einsum '", equation, "': a letter repeated in one operand (a diagonal)"));
      }
    }
    ops.push_back(std::move(x));
  }
  // The output's letters: given, or (implicit) the ellipsis then the
  // letters that appear once, in order.
  std::string out;
  if (arrow != std::string::npos) {
    out = equation.substr(arrow + 2);
    const size_t dots = out.find("...");
    for (size_t i = 0; i < out.size(); ++i) {
      if (!Letter(out[i]) && !(dots != std::string::npos && i >= dots && i < dots + 3)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Einsum '", equation, "': '", std::string(1, out[i]), "' (only letters and ...)"));
      }
    }
    if (dots != std::string::npos) {
      std::string fill;
      for (int i = 0; i < std::max(0, ellipsis_rank); ++i) fill += EllipsisDim(i);
      out = out.substr(0, dots) + fill + out.substr(dots + 3);
    }
    for (char c : out) {
      if (std::count(out.begin(), out.end(), c) > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("Einsum '", equation, "': a letter repeated in the output"));
      }
    }
  } else {
    for (int i = 0; i < std::max(0, ellipsis_rank); ++i) out += EllipsisDim(i);
    std::map<char, int> count;
    for (const Operand& x : ops) {
      for (char c : x.letters) ++count[c];
    }
    for (const auto& [c, n] : count) {
      if (n == 1 && Letter(c)) out += c;
    }
  }
  std::map<char, Dim> size;
  for (const Operand& x : ops) {
    for (size_t i = 0; i < x.letters.size(); ++i) {
      const Dim d = x.shape.dim(static_cast<int>(i));
      auto [it, fresh] = size.emplace(x.letters[i], d);
      if (!fresh && it->second != d) {
        return absl::InvalidArgumentError(
            absl::StrCat("Einsum '", equation, "': letter '", std::string(1, x.letters[i]),
                         "' has two sizes (broadcasting a dim of 1 is not supported)"));
      }
    }
  }
  for (char c : out) {
    if (!size.count(c)) {
      return absl::InvalidArgumentError(absl::StrCat("Einsum '", equation, "': output letter '",
                                                     std::string(1, c), "' is in no operand"));
    }
  }
  if (fold) return FoldEinsum(ctx, node, ops, constants, out, size);
  Builder b(ctx, node.name().empty() ? "Einsum" : node.name());
  // Left to right, each product keeping the letters the output or a later
  // operand has.
  Operand result = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::string keep = out;
    for (size_t k = i + 1; k < ops.size(); ++k) keep += ops[k].letters;
    ASSIGN_OR_RETURN(result,
                     Contract(b, equation, std::move(result), std::move(ops[i]), keep, size));
  }
  RETURN_IF_ERROR(b.SumOut(&result, out));
  RETURN_IF_ERROR(b.Permute(&result, out));
  return ctx.Emit(node, "Identity", {result.tensor}, {});
}

}  // namespace quilt::onnx_import
