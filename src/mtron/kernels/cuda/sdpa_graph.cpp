// The attention graphs of sdpa_graph.h: the operations, in the order and with the shapes,
// strides and element types that cuDNN's fused attention engines recognise (NVIDIA's
// cudnn-frontend builds the same graphs from its SDPA nodes): scores and probabilities are
// virtual fp32 tensors [B, H, Sq, Sk], the probabilities (and the backward's dS) rounded to bf16
// as the A operand of the second product, K (and the backward's V) read transposed through
// swapped strides.
#include "mtron/kernels/cuda/sdpa_graph.h"

#include <array>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "mtron/core/error.h"

namespace mtron::kernels::cuda {
namespace {

using Dims = std::array<int64_t, 4>;

class Builder {
 public:
  SdpaGraph g;

  // A tensor in memory.
  int memory(int64_t uid, Dims dim, Dims stride, GType type) {
    return add(uid, dim, stride, type, false);
  }
  // A virtual tensor.
  int temp(Dims dim, Dims stride, GType type = GType::kFloat) {
    return add(next_uid_++, dim, stride, type, true);
  }
  // A scalar passed by value.
  int scalar(float v) {
    const int t = add(next_uid_++, {1, 1, 1, 1}, {1, 1, 1, 1}, GType::kFloat, false);
    g.tensors[size_t(t)].by_value = true;
    g.tensors[size_t(t)].value = v;
    return t;
  }
  const GTensor& at(int t) const { return g.tensors[size_t(t)]; }

  // mode(a[, b[, c]]) into `out`, or into a new virtual tensor of a's shape and `type`.
  int pointwise(GMode mode,
                int a,
                int b = -1,
                int c = -1,
                int out = -1,
                GType type = GType::kFloat,
                GType compute = GType::kFloat,
                int64_t axis = -1) {
    if (out < 0) out = temp(dims(a), strides(a), type);
    GOp op{GOpKind::kPointwise, mode, {a, b, c}, out, axis, compute};
    g.ops.push_back(op);
    return out;
  }
  void matmul(int a, int b, int out) {
    g.ops.push_back(GOp{GOpKind::kMatmul, GMode::kNone, {a, b, -1}, out, -1, GType::kFloat});
  }
  void reduce(GMode mode, int x, int out) {
    g.ops.push_back(GOp{GOpKind::kReduction, mode, {x, -1, -1}, out, -1, GType::kFloat});
  }
  // x seen through dims and strides (a virtual tensor of element type `type`).
  int reshape(int x, Dims dim, Dims stride, GType type) {
    const int out = temp(dim, stride, type);
    g.ops.push_back(GOp{GOpKind::kReshape, GMode::kNone, {x, -1, -1}, out, -1, GType::kFloat});
    return out;
  }

 private:
  int64_t next_uid_ = 100;
  Dims dims(int t) const {
    const GTensor& x = at(t);
    return {x.dim[0], x.dim[1], x.dim[2], x.dim[3]};
  }
  Dims strides(int t) const {
    const GTensor& x = at(t);
    return {x.stride[0], x.stride[1], x.stride[2], x.stride[3]};
  }
  int add(int64_t uid, Dims dim, Dims stride, GType type, bool is_virtual) {
    GTensor t{uid, {}, {}, type, is_virtual, false, 0.0f, false};
    for (int n = 0; n < 4; ++n) t.dim[n] = dim[size_t(n)], t.stride[n] = stride[size_t(n)];
    g.tensors.push_back(t);
    return int(g.tensors.size()) - 1;
  }
};

// The tensors' dims and strides (kernels/attention.h's layouts): row r of head h of sequence b
// at off(b, h) + r step, so the batch and head strides are off's differences (affine in b and h
// but for the fused layout with several query heads per group, which sdpa_takes excludes).
struct Layouts {
  Dims q_dim, q_stride, kt_dim, kt_stride, k_dim, k_stride, vt_dim, vt_stride, v_dim, v_stride;
  Dims o_dim, o_stride, stat_dim, stat_stride, score_dim, score_stride, scoret_dim, scoret_stride;
};
Layouts layouts(const AttnShape& s) {
  Layouts l;
  const int64_t qb = s.q_off(1, 0) - s.q_off(0, 0), qh = s.q_off(0, 1) - s.q_off(0, 0);
  l.q_dim = {s.B, s.H, s.Sq, s.D};
  l.q_stride = {qb, qh, s.q_step(), 1};
  const auto kv = [&](int64_t width, Dims& dim, Dims& stride, Dims& tdim, Dims& tstride) {
    const int64_t b = s.kv_off(1, 0, width) - s.kv_off(0, 0, width);
    const int64_t g = s.kv_off(0, 1, width) - s.kv_off(0, 0, width);
    dim = {s.B, s.G, s.Sk, width};
    stride = {b, g, s.kv_step(width), 1};
    tdim = {s.B, s.G, width, s.Sk};  // transposed: the last two dims and strides swapped
    tstride = {b, g, 1, s.kv_step(width)};
  };
  kv(s.D, l.k_dim, l.k_stride, l.kt_dim, l.kt_stride);
  kv(s.Dv, l.v_dim, l.v_stride, l.vt_dim, l.vt_stride);
  l.o_dim = {s.B, s.H, s.Sq, s.Dv};
  l.o_stride = {s.o_at(0, 1, 0) - s.o_at(0, 0, 0), s.o_at(0, 0, 1) - s.o_at(0, 0, 0), s.o_step(),
                1};
  l.stat_dim = {s.B, s.H, s.Sq, 1};
  l.stat_stride = {s.H * s.Sq, s.Sq, 1, 1};
  l.score_dim = {s.B, s.H, s.Sq, s.Sk};
  l.score_stride = {s.H * s.Sq * s.Sk, s.Sq * s.Sk, s.Sk, 1};
  l.scoret_dim = {s.B, s.H, s.Sk, s.Sq};  // the scores' transpose, the same elements
  l.scoret_stride = {s.H * s.Sq * s.Sk, s.Sq * s.Sk, 1, s.Sk};
  return l;
}

// The scores x scale, masked: where the causal mask hides key j from query i, the lowest float
// (row index >= column index keeps the score; cuDNN before 9.10 takes no -inf there, and
// exp(lowest - max) is 0 as exp(-inf) is).
int masked_scores(Builder& b, int scores, float scale, const AttnMask& m) {
  int x = b.pointwise(GMode::kMul, scores, b.scalar(scale));
  if (!m.causal) return x;
  const int row = b.pointwise(GMode::kGenIndex, x, -1, -1, -1, GType::kInt32, GType::kFloat, 2);
  const int col = b.pointwise(GMode::kGenIndex, x, -1, -1, -1, GType::kInt32, GType::kFloat, 3);
  const int keep = b.pointwise(GMode::kCmpGe, row, col, -1, -1, GType::kBool, GType::kBool);
  const int hidden = b.scalar(std::numeric_limits<float>::lowest());
  return b.pointwise(GMode::kBinarySelect, x, hidden, keep);
}

SdpaGraph forward_graph(const AttnShape& s, const AttnMask& m) {
  const Layouts l = layouts(s);
  Builder b;
  const int q = b.memory(kUidQ, l.q_dim, l.q_stride, GType::kBf16);
  const int kt = b.memory(kUidK, l.kt_dim, l.kt_stride, GType::kBf16);
  const int scores = b.temp(l.score_dim, l.score_stride);
  b.matmul(q, kt, scores);
  const int x = masked_scores(b, scores, s.scale, m);
  // softmax, and lse = max + log(sum of exp(x - max)) per row
  const int mx = b.temp(l.stat_dim, l.stat_stride);
  b.reduce(GMode::kMax, x, mx);
  const int e = b.pointwise(GMode::kExp, b.pointwise(GMode::kSub, x, mx));
  const int sum = b.temp(l.stat_dim, l.stat_stride);
  b.reduce(GMode::kSum, e, sum);
  const int stats = b.memory(kUidStats, l.stat_dim, l.stat_stride, GType::kFloat);
  b.pointwise(GMode::kAdd, mx, b.pointwise(GMode::kLog, sum), -1, stats);
  const int p = b.pointwise(GMode::kDiv, e, sum, -1, -1, GType::kBf16);
  const int v = b.memory(kUidV, l.v_dim, l.v_stride, GType::kBf16);
  const int o = b.memory(kUidO, l.o_dim, l.o_stride, GType::kBf16);
  b.matmul(p, v, o);
  return b.g;
}

SdpaGraph backward_graph(const AttnShape& s, const AttnMask& m) {
  const Layouts l = layouts(s);
  Builder b;
  // delta = dO . O per query row, into Sum
  const int dout = b.memory(kUidDO, l.o_dim, l.o_stride, GType::kBf16);
  const int o = b.memory(kUidO, l.o_dim, l.o_stride, GType::kBf16);
  const int prod = b.temp(l.o_dim, {s.H * s.Sq * s.Dv, s.Sq * s.Dv, s.Dv, 1});
  b.pointwise(GMode::kMul, dout, o, -1, prod);
  const int rowsum = b.temp(l.stat_dim, l.stat_stride);
  b.reduce(GMode::kSum, prod, rowsum);
  const int delta = b.memory(kUidSum, l.stat_dim, l.stat_stride, GType::kFloat);
  b.pointwise(GMode::kMul, rowsum, b.scalar(1.0f), -1, delta);
  // P = exp(scores x scale - lse), masked
  const int q = b.memory(kUidQ, l.q_dim, l.q_stride, GType::kBf16);
  const int kt = b.memory(kUidK, l.kt_dim, l.kt_stride, GType::kBf16);
  const int scores = b.temp(l.score_dim, l.score_stride);
  b.matmul(q, kt, scores);
  const int x = masked_scores(b, scores, s.scale, m);
  const int stats = b.memory(kUidStats, l.stat_dim, l.stat_stride, GType::kFloat);
  const int p = b.pointwise(GMode::kExp, b.pointwise(GMode::kSub, x, stats));
  // dV = P^T dO (per query head, then summed over a group's heads)
  const int pt = b.reshape(p, l.scoret_dim, l.scoret_stride, GType::kBf16);
  const int dv = b.memory(kUidDV, l.v_dim, l.v_stride, GType::kBf16);
  const auto grouped = [&](int a, int bb, int out, int64_t width) {
    if (s.H == s.G) return b.matmul(a, bb, out);
    const int full =
        b.temp({s.B, s.H, s.Sk, width}, {s.H * s.Sk * width, s.Sk * width, width, 1}, GType::kBf16);
    b.matmul(a, bb, full);
    b.reduce(GMode::kSum, full, out);
  };
  grouped(pt, dout, dv, s.Dv);
  // dS = P (dP - delta) scale, dP = dO V^T
  const int vt = b.memory(kUidV, l.vt_dim, l.vt_stride, GType::kBf16);
  const int dp = b.temp(l.score_dim, l.score_stride);
  b.matmul(dout, vt, dp);
  const int ds =
      b.pointwise(GMode::kMul, b.pointwise(GMode::kMul, b.pointwise(GMode::kSub, dp, delta), p),
                  b.scalar(s.scale));
  // dK = dS^T Q, dQ = dS K
  const int dst = b.reshape(ds, l.scoret_dim, l.scoret_stride, GType::kBf16);
  const int dk = b.memory(kUidDK, l.k_dim, l.k_stride, GType::kBf16);
  grouped(dst, q, dk, s.D);
  const int k = b.reshape(kt, l.k_dim, l.k_stride, GType::kFloat);
  const int dq = b.memory(kUidDQ, l.q_dim, l.q_stride, GType::kBf16);
  if (!s.nondeterministic) {
    b.matmul(ds, k, dq);
    return b.g;
  }
  const int acc =
      b.memory(kUidDQAccum, l.q_dim, {s.H * s.Sq * s.D, s.Sq * s.D, s.D, 1}, GType::kFloat);
  b.g.tensors[size_t(acc)].accumulated = true;
  b.matmul(ds, k, acc);
  b.pointwise(GMode::kIdentity, acc, -1, -1, dq);
  return b.g;
}

// The whole graph as text (SdpaGraph::key).
std::string graph_key(const SdpaGraph& g) {
  std::string k;
  const auto num = [&](int64_t v) { k += std::to_string(v), k += ','; };
  for (const GTensor& t : g.tensors) {
    num(t.uid);
    for (int n = 0; n < 4; ++n) num(t.dim[n]), num(t.stride[n]);
    num(int64_t(t.type)), num(t.is_virtual), num(t.by_value), num(t.accumulated);
    k += ';';  // by-value scalars' values are data, not part of the graph
  }
  for (const GOp& op : g.ops) {
    num(int64_t(op.kind)), num(int64_t(op.mode)), num(op.in[0]), num(op.in[1]), num(op.in[2]);
    num(op.out), num(op.axis), num(int64_t(op.compute));
    k += ';';
  }
  return k;
}

// The graph of (s, m) in one direction, made on first use.
const SdpaGraph& cached(const AttnShape& s, const AttnMask& m, bool forward) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool,
                         bool, int64_t, bool, bool>;
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<SdpaGraph>> graphs;
  const Key key{s.B,
                s.Sq,
                s.Sk,
                s.H,
                s.G,
                s.D,
                s.Dv,
                s.scale,
                s.fused_qkv,
                m.causal,
                m.offset,
                forward,
                !forward && s.nondeterministic};  // the forward graph is the same either way
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<SdpaGraph>& g = graphs[key];
  if (!g) {
    g = std::make_unique<SdpaGraph>(forward ? forward_graph(s, m) : backward_graph(s, m));
    g->key = graph_key(*g);
  }
  return *g;
}

}  // namespace

bool sdpa_takes(const AttnShape& s, const AttnMask& m) {
  const bool dims = s.D % 8 == 0 && s.Dv % 8 == 0 && s.D <= 256 && s.Dv <= 256;
  return s.bf16_products && m.dropout.p == 0 && (!m.causal || m.offset == 0) && dims &&
         (!s.fused_qkv || s.H == s.G) && s.B > 0 && s.Sq > 0 && s.Sk > 0;
}

const SdpaGraph& sdpa_forward_graph(const AttnShape& s, const AttnMask& m) {
  return cached(s, m, true);
}

const SdpaGraph& sdpa_backward_graph(const AttnShape& s, const AttnMask& m) {
  return cached(s, m, false);
}

bool attention_forward_cudnn(cudaStream_t st,
                             uint16_t* out,
                             float* lse,
                             const uint16_t* q,
                             const uint16_t* k,
                             const uint16_t* v,
                             const AttnShape& s,
                             const AttnMask& m) {
  if (s.own_kernels || !sdpa_takes(s, m) || !aligned16({out, lse, q, k, v})) return false;
  return run_graph(st, sdpa_forward_graph(s, m),
                   {{kUidQ, q}, {kUidK, k}, {kUidV, v}, {kUidO, out}, {kUidStats, lse}});
}

bool attention_backward_cudnn(cudaStream_t st,
                              uint16_t* dq,
                              uint16_t* dk,
                              uint16_t* dv,
                              const uint16_t* dout,
                              const uint16_t* q,
                              const uint16_t* k,
                              const uint16_t* v,
                              const uint16_t* out,
                              const float* lse,
                              const AttnShape& s,
                              const AttnMask& m) {
  if (s.own_kernels || !sdpa_takes(s, m) || !aligned16({dq, dk, dv, dout, q, k, v, out, lse}))
    return false;
  Scratch delta(sizeof(float) * size_t(s.B * s.H * s.Sq), st);
  Scratch dq_accum(s.nondeterministic ? sizeof(float) * size_t(s.B * s.H * s.Sq * s.D) : 0, st);
  std::vector<Binding> mem = {{kUidDO, dout}, {kUidO, out}, {kUidSum, delta.as<float>()},
                              {kUidQ, q},     {kUidK, k},   {kUidStats, lse},
                              {kUidDV, dv},   {kUidV, v},   {kUidDK, dk},
                              {kUidDQ, dq}};
  if (s.nondeterministic) mem.push_back({kUidDQAccum, dq_accum.as<float>()});
  return run_graph(st, sdpa_backward_graph(s, m), mem);
}

}  // namespace mtron::kernels::cuda
