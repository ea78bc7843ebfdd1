// Transformer models: the original encoder-decoder (base), BERT-large with
// an MLM head, and GPT-2 (any size), with tied input/output embeddings
// where the originals tie them.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/zoo/layers.h"
#include "src/graph/zoo/zoo.h"

namespace quilt::zoo {
namespace {

absl::StatusOr<std::string> Positions(Layers& l, int64_t s) {
  std::vector<int64_t> pos(s);
  for (int64_t i = 0; i < s; ++i) pos[i] = i;
  return l.b().AddConstant("positions", Tensor::FromI64({s}, pos));
}

// Sinusoidal position encodings [s, d] (Vaswani et al.).
absl::StatusOr<std::string> Sinusoid(Layers& l, int64_t s, int64_t d) {
  std::vector<float> pe(s * d);
  for (int64_t p = 0; p < s; ++p) {
    for (int64_t i = 0; i < d; i += 2) {
      const double f = std::pow(10000.0, -static_cast<double>(i) / d);
      pe[p * d + i] = static_cast<float>(std::sin(p * f));
      if (i + 1 < d) pe[p * d + i + 1] = static_cast<float>(std::cos(p * f));
    }
  }
  return l.b().AddConstant("position_encoding", Tensor::FromF32({s, d}, pe));
}

absl::StatusOr<std::string> FeedForward(Layers& l, const std::string& n, const std::string& x,
                                        int64_t d, int64_t ff, bool gelu, bool tanh_gelu) {
  ASSIGN_OR_RETURN(std::string h, l.Linear(n + ".fc1", x, d, ff));
  if (gelu) {
    ASSIGN_OR_RETURN(h, l.Gelu(h, tanh_gelu));
  } else {
    ASSIGN_OR_RETURN(h, l.Relu(h));
  }
  return l.Linear(n + ".fc2", h, ff, d);
}

// Logits = h · Eᵀ with the (tied) embedding matrix E [vocab, d].
absl::StatusOr<std::string> TiedLogits(Layers& l, const std::string& h, const std::string& emb) {
  Attrs a;
  a.SetInt("trans_b", 1);
  return l.Op("MatMul", {h, emb}, std::move(a), "logits");
}

void LanguageModelLoss(Graph* g, const std::string& logits) {
  g->outputs = {logits};
  g->loss.type = LossType::kSoftmaxCrossEntropy;
  g->loss.prediction = logits;
}

}  // namespace

absl::StatusOr<Graph> BuildTransformerBase(uint64_t seed) {
  const int64_t d = 512, ff = 2048, heads = 8, vocab = 37000, s = 128, layers = 6;
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string src, l.Input("src_tokens", DType::kI64, {s}));
  ASSIGN_OR_RETURN(std::string tgt, l.Input("tgt_tokens", DType::kI64, {s}));
  InitializerSpec n;
  n.kind = InitializerSpec::Kind::kNormal;
  n.stddev = 1.0 / std::sqrt(static_cast<double>(d));
  ASSIGN_OR_RETURN(std::string emb, l.Param("embedding.weight", {vocab, d}, n));
  ASSIGN_OR_RETURN(std::string pe, Sinusoid(l, s, d));
  auto embed = [&](const std::string& tokens) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(std::string e, l.Op("Gather", {emb, tokens}));
    return l.Add(e, pe);
  };
  ASSIGN_OR_RETURN(std::string x, embed(src));
  for (int i = 0; i < layers; ++i) {
    const std::string nm = absl::StrCat("encoder.", i);
    ASSIGN_OR_RETURN(std::string a, l.Attention(nm + ".attn", x, x, d, heads, s, s, ""));
    ASSIGN_OR_RETURN(x, l.Add(x, a));
    ASSIGN_OR_RETURN(x, l.LayerNorm(nm + ".ln1", x, d));
    ASSIGN_OR_RETURN(std::string f, FeedForward(l, nm + ".ff", x, d, ff, false, false));
    ASSIGN_OR_RETURN(x, l.Add(x, f));
    ASSIGN_OR_RETURN(x, l.LayerNorm(nm + ".ln2", x, d));
  }
  const std::string memory = x;
  ASSIGN_OR_RETURN(std::string mask, l.CausalMask(s));
  ASSIGN_OR_RETURN(std::string y, embed(tgt));
  for (int i = 0; i < layers; ++i) {
    const std::string nm = absl::StrCat("decoder.", i);
    ASSIGN_OR_RETURN(std::string a, l.Attention(nm + ".self_attn", y, y, d, heads, s, s, mask));
    ASSIGN_OR_RETURN(y, l.Add(y, a));
    ASSIGN_OR_RETURN(y, l.LayerNorm(nm + ".ln1", y, d));
    ASSIGN_OR_RETURN(std::string c, l.Attention(nm + ".cross_attn", y, memory, d, heads, s, s, ""));
    ASSIGN_OR_RETURN(y, l.Add(y, c));
    ASSIGN_OR_RETURN(y, l.LayerNorm(nm + ".ln2", y, d));
    ASSIGN_OR_RETURN(std::string f, FeedForward(l, nm + ".ff", y, d, ff, false, false));
    ASSIGN_OR_RETURN(y, l.Add(y, f));
    ASSIGN_OR_RETURN(y, l.LayerNorm(nm + ".ln3", y, d));
  }
  ASSIGN_OR_RETURN(std::string logits, TiedLogits(l, y, emb));
  LanguageModelLoss(&g, logits);
  return g;
}

absl::StatusOr<Graph> BuildBertLarge(uint64_t seed) {
  const int64_t d = 1024, ff = 4096, heads = 16, vocab = 30522, s = 128, layers = 24;
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string ids, l.Input("input_ids", DType::kI64, {s}));
  InitializerSpec n;
  n.kind = InitializerSpec::Kind::kNormal;
  n.stddev = 0.02;
  ASSIGN_OR_RETURN(std::string wemb, l.Param("embeddings.word.weight", {vocab, d}, n));
  ASSIGN_OR_RETURN(std::string x, l.Op("Gather", {wemb, ids}));
  ASSIGN_OR_RETURN(std::string pos, Positions(l, s));
  ASSIGN_OR_RETURN(std::string pemb, l.Embedding("embeddings.position", pos, 512, d));
  ASSIGN_OR_RETURN(x, l.Add(x, pemb));
  ASSIGN_OR_RETURN(
      std::string types,
      l.b().AddConstant("token_types", Tensor::FromI64({s}, std::vector<int64_t>(s, 0))));
  ASSIGN_OR_RETURN(std::string temb, l.Embedding("embeddings.token_type", types, 2, d));
  ASSIGN_OR_RETURN(x, l.Add(x, temb));
  ASSIGN_OR_RETURN(x, l.LayerNorm("embeddings.ln", x, d));
  for (int i = 0; i < layers; ++i) {
    const std::string nm = absl::StrCat("encoder.", i);
    ASSIGN_OR_RETURN(std::string a, l.Attention(nm + ".attn", x, x, d, heads, s, s, ""));
    ASSIGN_OR_RETURN(x, l.Add(x, a));
    ASSIGN_OR_RETURN(x, l.LayerNorm(nm + ".ln1", x, d));
    ASSIGN_OR_RETURN(std::string f, FeedForward(l, nm + ".ff", x, d, ff, true, false));
    ASSIGN_OR_RETURN(x, l.Add(x, f));
    ASSIGN_OR_RETURN(x, l.LayerNorm(nm + ".ln2", x, d));
  }
  // MLM head: transform, then the tied decoder with its own bias.
  ASSIGN_OR_RETURN(x, l.Linear("mlm.transform", x, d, d));
  ASSIGN_OR_RETURN(x, l.Gelu(x));
  ASSIGN_OR_RETURN(x, l.LayerNorm("mlm.ln", x, d));
  ASSIGN_OR_RETURN(std::string logits, TiedLogits(l, x, wemb));
  InitializerSpec zeros;
  ASSIGN_OR_RETURN(std::string bias, l.Param("mlm.decoder.bias", {vocab}, zeros));
  ASSIGN_OR_RETURN(logits, l.Add(logits, bias));
  LanguageModelLoss(&g, logits);
  return g;
}

absl::StatusOr<Graph> BuildGpt2(int64_t layers, int64_t d, int64_t heads, uint64_t seed) {
  const int64_t vocab = 50257, s = 1024;
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string ids, l.Input("input_ids", DType::kI64, {s}));
  InitializerSpec n;
  n.kind = InitializerSpec::Kind::kNormal;
  n.stddev = 0.02;
  ASSIGN_OR_RETURN(std::string wte, l.Param("wte.weight", {vocab, d}, n));
  ASSIGN_OR_RETURN(std::string x, l.Op("Gather", {wte, ids}));
  ASSIGN_OR_RETURN(std::string pos, Positions(l, s));
  ASSIGN_OR_RETURN(std::string wpe, l.Embedding("wpe", pos, s, d));
  ASSIGN_OR_RETURN(x, l.Add(x, wpe));
  ASSIGN_OR_RETURN(std::string mask, l.CausalMask(s));
  for (int64_t i = 0; i < layers; ++i) {
    const std::string nm = absl::StrCat("h.", i);
    ASSIGN_OR_RETURN(std::string h, l.LayerNorm(nm + ".ln_1", x, d));
    ASSIGN_OR_RETURN(h, l.Attention(nm + ".attn", h, h, d, heads, s, s, mask));
    ASSIGN_OR_RETURN(x, l.Add(x, h));
    ASSIGN_OR_RETURN(h, l.LayerNorm(nm + ".ln_2", x, d));
    ASSIGN_OR_RETURN(h, FeedForward(l, nm + ".mlp", h, d, 4 * d, true, true));
    ASSIGN_OR_RETURN(x, l.Add(x, h));
  }
  ASSIGN_OR_RETURN(x, l.LayerNorm("ln_f", x, d));
  ASSIGN_OR_RETURN(std::string logits, TiedLogits(l, x, wte));
  LanguageModelLoss(&g, logits);
  return g;
}

}  // namespace quilt::zoo
