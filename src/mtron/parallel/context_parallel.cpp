#include "mtron/parallel/context_parallel.h"

#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/rope.h"
#include "mtron/parallel/ring_attention.h"

namespace mtron::parallel {

namespace {

constexpr int64_t kF = int64_t(sizeof(float));

// Element i of a buffer of es-byte elements.
void* at(void* p, int64_t i, int64_t es) {
  return static_cast<char*>(p) + i * es;
}
const void* at(const void* p, int64_t i, int64_t es) {
  return static_cast<const char*>(p) + i * es;
}

// Room for n elements of type t (kF32 or kBF16).
void* room(Arena& scratch, int64_t n, DType t) {
  return t == DType::kBF16 ? static_cast<void*>(scratch.alloc<bf16>(n))
                           : static_cast<void*>(scratch.alloc<float>(n));
}

// What an exchange sends of n fp32 values: the values, or with `narrow` (they hold bf16 values)
// their bf16 copy, half the bytes and exact.
struct Wire {
  Wire(const kernels::Ctx& ctx, Arena& scratch, bool narrow, const float* src, int64_t n)
      : dtype(narrow ? DType::kBF16 : DType::kF32), es(int64_t(dtype_size(dtype))), data(src) {
    if (!narrow) return;
    bf16* copy = scratch.alloc<bf16>(n);
    kernels::convert(ctx, copy, src, n);
    data = copy;
  }
  DType dtype;
  int64_t es;
  const void* data;
};

// One tensor of this rank: its two local chunks of c tokens for B sequences, H heads of W
// elements.
struct Rows {
  int64_t c, B, H, W;
  int64_t chunk() const { return c * B * H * W; }  // elements of one local chunk
};

// The heads' all-to-all over group g (a ranks). seq_to_heads sends rank j heads
// [j H/a, (j+1) H/a) of both local chunks; what arrives is the group's chunks for this rank's
// heads in sequence order, [2ac, B, H/a, W]: the first chunks of ranks 0..a-1, then the second
// chunks of ranks a-1..0 (rank r of the group holds chunks r and 2a-1-r of the group's 2a).
// heads_to_seq is its inverse. Any element type: fp32 tensors, their bf16 copies, bf16 tensors.
struct HeadExchange {
  HeadExchange(Comm& group, const Rows& rows)
      : g(group), r(rows), a(g.size()), hs(r.H / a), piece(r.c * r.B * hs * r.W) {
    MT_ASSERT(r.H % a == 0, "the heads' all-to-all: ", r.H, " heads over ", a, " ranks");
    counts.assign(size_t(a), piece);
    for (int64_t j = 0; j < a; ++j) {
      packed.push_back(j * piece);
      sharded[0].push_back(j * piece);
      sharded[1].push_back((2 * a - 1 - j) * piece);
    }
  }

  // Local chunk h's heads for rank j, [cB, H/a, W], from or into their columns of [cB, H, W],
  // es bytes an element.
  void pack(const kernels::Ctx& ctx, void* dst, const void* src, int64_t h, int64_t es) const {
    for (int64_t j = 0; j < a; ++j) {
      kernels::copy_rows(ctx, at(dst, j * piece, es), es * hs * r.W,
                         at(src, h * r.chunk() + j * hs * r.W, es), es * r.H * r.W, es * hs * r.W,
                         r.c * r.B);
    }
  }
  void unpack(const kernels::Ctx& ctx, void* dst, const void* src, int64_t h, int64_t es) const {
    for (int64_t j = 0; j < a; ++j) {
      kernels::copy_rows(ctx, at(dst, h * r.chunk() + j * hs * r.W, es), es * r.H * r.W,
                         at(src, j * piece, es), es * hs * r.W, es * hs * r.W, r.c * r.B);
    }
  }

  int64_t sharded_elems() const { return 2 * a * piece; }  // [2ac, B, H/a, W]

  // src [2 local chunks, cB, H, W] to dst [2ac, B, H/a, W], elements of type t.
  void seq_to_heads(
      const kernels::Ctx& ctx, Arena& scratch, void* dst, const void* src, DType t) const {
    const int64_t es = int64_t(dtype_size(t));
    void* buf = room(scratch, a * piece, t);
    for (int64_t h = 0; h < 2; ++h) {
      pack(ctx, buf, src, h, es);
      MT_PROFILE("cp.all_to_all");
      g.all_to_all_v(buf, counts.data(), packed.data(), dst, counts.data(), sharded[h].data(), t);
    }
  }
  // The inverse.
  void heads_to_seq(
      const kernels::Ctx& ctx, Arena& scratch, void* dst, const void* src, DType t) const {
    const int64_t es = int64_t(dtype_size(t));
    void* buf = room(scratch, a * piece, t);
    for (int64_t h = 0; h < 2; ++h) {
      {
        MT_PROFILE("cp.all_to_all");
        g.all_to_all_v(src, counts.data(), sharded[h].data(), buf, counts.data(), packed.data(), t);
      }
      unpack(ctx, dst, buf, h, es);
    }
  }

  Comm& g;
  Rows r;
  int64_t a, hs, piece;
  std::vector<int64_t> counts, packed, sharded[2];
};

// The all-to-all group of a2a (the CP group) or a2a+p2p (its first level).
Comm& a2a_group(const ContextParallel& cp, CpCommType t) {
  return t == CpCommType::kA2A ? *cp.comm : *cp.a2a_level;
}

// The ring after the all-to-all: of size 1 for a2a; a2a+p2p's second level.
ContextParallel ring_after_a2a(const ContextParallel& cp, CpCommType t) {
  if (t != CpCommType::kA2AP2P) return ContextParallel();
  const Comm& group = *cp.a2a_level;
  const int64_t a = group.size();
  MT_ASSERT(cp.ring_level && cp.ring_level->size() * a == cp.size &&
                cp.ring_level->rank() == cp.rank / a && group.rank() == cp.rank % a,
            "a2a+p2p: the hierarchical groups do not match CP rank ", cp.rank);
  return ContextParallel(cp.ring_level, cp.ring_level->rank(), cp.ring_level->size());
}

// a2a and a2a+p2p: the heads' all-to-all over `group`, then ring attention over `ring` (the
// groups' ring; of size 1 for a2a) on the head-sharded sequence.
struct HeadSharded {
  HeadSharded(const ContextParallel& cp, CpCommType t, const kernels::AttnShape& s)
      : group(a2a_group(cp, t)),
        c(s.Sq / 2),
        q(group, Rows{c, s.B, s.H, s.D}),
        k(group, Rows{c, s.B, s.G, s.D}),
        v(group, Rows{c, s.B, s.G, s.Dv}),
        o(group, Rows{c, s.B, s.H, s.Dv}),
        shape(s),
        ring(ring_after_a2a(cp, t)) {
    const int64_t a = group.size();
    shape.Sq = shape.Sk = 2 * a * c;
    shape.H = s.H / a;
    shape.G = s.G / a;
  }
  kernels::AttnDropout dropout(kernels::AttnDropout d) const {
    d.h0 += group.rank() * shape.H;
    return d;
  }
  // A head-sharded buffer for q, k, v or out (or its gradient), zeroed or the exchange of `src`
  // (with `narrow`, src holding bf16 values, as bf16: exactly, half the bytes).
  float* alloc(Arena& scratch, const HeadExchange& x) const {
    return scratch.alloc<float>(x.sharded_elems());
  }
  float* zeros(const kernels::Ctx& ctx, Arena& scratch, const HeadExchange& x) const {
    float* p = alloc(scratch, x);
    kernels::fill_zero(ctx, p, kF * x.sharded_elems());
    return p;
  }
  float* send(const kernels::Ctx& ctx,
              Arena& scratch,
              const HeadExchange& x,
              const float* src,
              bool narrow) const {
    float* p = alloc(scratch, x);
    const Wire w(ctx, scratch, narrow, src, 2 * x.r.chunk());
    void* to = narrow ? room(scratch, x.sharded_elems(), w.dtype) : p;
    x.seq_to_heads(ctx, scratch, to, w.data, w.dtype);
    if (narrow) kernels::convert(ctx, p, static_cast<const bf16*>(to), x.sharded_elems());
    return p;
  }
  // The head-sharded `src` home into dst: the output (with `narrow` rounded to bf16 for the
  // exchange, which the caller rounds anyway), or gradients added into it (fp32).
  void home(const kernels::Ctx& ctx,
            Arena& scratch,
            const HeadExchange& x,
            float* dst,
            const float* src,
            bool add,
            bool narrow) const {
    MT_ASSERT(!(add && narrow), "the heads' all-to-all adds fp32 values only");
    const Wire w(ctx, scratch, narrow, src, x.sharded_elems());
    void* to = add || narrow ? room(scratch, 2 * x.r.chunk(), w.dtype) : dst;
    x.heads_to_seq(ctx, scratch, to, w.data, w.dtype);
    if (narrow) kernels::convert(ctx, dst, static_cast<const bf16*>(to), 2 * x.r.chunk());
    if (add) kernels::add(ctx, dst, dst, static_cast<const float*>(to), 2 * x.r.chunk());
  }
  // q, k and v exchanged, in this order on every rank (the all-to-alls are collective).
  struct Qkv {
    const float *q, *k, *v;
  };
  Qkv send_qkv(const kernels::Ctx& ctx,
               Arena& scratch,
               const float* q_local,
               const float* k_local,
               const float* v_local,
               bool narrow) const {
    const float* qh = send(ctx, scratch, q, q_local, narrow);
    const float* kh = send(ctx, scratch, k, k_local, narrow);
    return Qkv{qh, kh, send(ctx, scratch, v, v_local, narrow)};
  }

  Comm& group;
  int64_t c;
  HeadExchange q, k, v, o;
  kernels::AttnShape shape;
  ContextParallel ring;  // size 1 for a2a
};

// all_gather: the whole sequence's rows [2*CP*c, B, X] in order, from every rank's two chunks
// of `chunk` elements each.
void gather_sequence(const kernels::Ctx& ctx,
                     const ContextParallel& cp,
                     Arena& scratch,
                     float* full,
                     const float* local,
                     int64_t chunk,
                     bool narrow) {
  const Wire w(ctx, scratch, narrow, local, 2 * chunk);
  void* ranks = room(scratch, 2 * cp.size * chunk, w.dtype);  // rank-major
  {
    MT_PROFILE("cp.all_gather");
    cp.comm->all_gather(w.data, ranks, 2 * chunk, w.dtype);
  }
  for (int64_t j = 0; j < cp.size; ++j) {
    for (int64_t h = 0; h < 2; ++h) {
      float* to = full + ContextParallel::chunk_of(j, cp.size, h) * chunk;
      const void* from = at(ranks, (2 * j + h) * chunk, w.es);
      if (narrow) {
        kernels::convert(ctx, to, static_cast<const bf16*>(from), chunk);
      } else {
        kernels::copy(ctx, to, from, kF * chunk);
      }
    }
  }
}

// The inverse's adjoint: each rank's two chunks of the whole sequence's `full`, summed over the
// CP ranks, added into `local`.
void reduce_scatter_sequence(const kernels::Ctx& ctx,
                             const ContextParallel& cp,
                             Arena& scratch,
                             float* local,
                             const float* full,
                             int64_t chunk) {
  float* ranks = scratch.alloc<float>(2 * cp.size * chunk);
  for (int64_t j = 0; j < cp.size; ++j) {
    for (int64_t h = 0; h < 2; ++h) {
      kernels::copy(ctx, ranks + (2 * j + h) * chunk,
                    full + ContextParallel::chunk_of(j, cp.size, h) * chunk, kF * chunk);
    }
  }
  float* mine = scratch.alloc<float>(2 * chunk);
  {
    MT_PROFILE("cp.reduce_scatter");
    cp.comm->reduce_scatter(ranks, mine, 2 * chunk, DType::kF32, ReduceOp::kSum);
  }
  kernels::add(ctx, local, local, mine, 2 * chunk);
}

// all_gather: the whole sequence's K and V (kc and vc elements per local chunk), in order.
struct GatheredKv {
  GatheredKv(const kernels::Ctx& ctx,
             const ContextParallel& cp,
             Arena& scratch,
             const float* k_local,
             const float* v_local,
             const kernels::AttnShape& s,
             bool narrow)
      : kc(s.Sq / 2 * s.B * s.G * s.D),
        vc(s.Sq / 2 * s.B * s.G * s.Dv),
        k(scratch.alloc<float>(2 * cp.size * kc)),
        v(scratch.alloc<float>(2 * cp.size * vc)) {
    gather_sequence(ctx, cp, scratch, k, k_local, kc, narrow);
    gather_sequence(ctx, cp, scratch, v, v_local, vc, narrow);
  }
  int64_t kc, vc;
  float *k, *v;
};

// all_gather: local chunk h against the keys it sees, the whole sequence's first
// (chunk(h) + 1) * c positions, causal with the chunk's offset.
struct GatheredChunk {
  GatheredChunk(const ContextParallel& cp,
                const kernels::AttnShape& s,
                const kernels::AttnDropout& drop,
                int64_t h)
      : c(s.Sq / 2), shape(s), mask{true, cp.chunk(h) * c, drop} {
    shape.Sq = c;
    shape.Sk = (cp.chunk(h) + 1) * c;
    mask.dropout.q0 = cp.chunk(h) * c;
    mask.dropout.k0 = 0;
    q = h * c * s.B * s.H * s.D;
    o = h * c * s.B * s.H * s.Dv;
    lse = h * s.B * s.H * c;
  }
  int64_t c;
  kernels::AttnShape shape;
  kernels::AttnMask mask;
  int64_t q, o, lse;  // offsets of the chunk's q, out and lse
};

// The all-to-all of a2a and a2a+p2p over bf16 tensors in QKV's fused layout: a row's groups (each
// its H/G query heads, its key and its value head, adjacent) split over the group's ranks as the
// fp32 exchange splits the heads (rank j: groups [j G/a, (j+1) G/a), whose query heads are
// [j H/a, (j+1) H/a)); then a2a+p2p's ring.
struct FusedExchange {
  FusedExchange(const ContextParallel& cp, CpCommType t, const kernels::AttnShape& s)
      : c(s.Sq / 2),
        qkv(a2a_group(cp, t), Rows{c, s.B, s.G, (s.H / s.G + 2) * s.D}),
        out(a2a_group(cp, t), Rows{c, s.B, s.H, s.Dv}),
        shape(s),
        ring(ring_after_a2a(cp, t)) {
    MT_ASSERT(s.fused_qkv && s.Sq == s.Sk && s.Sq % 2 == 0,
              "a2a in the fused layout takes two equal local chunks of the QKV output");
    shape.Sq = shape.Sk = 2 * qkv.a * c;
    shape.H = s.H / qkv.a;
    shape.G = s.G / qkv.a;
  }
  int64_t rows() const { return shape.Sq * shape.B; }  // of the head-sharded tensors
  // The ring's shape: q, k, v apart.
  kernels::AttnShape packed() const {
    kernels::AttnShape p = shape;
    p.fused_qkv = false;
    return p;
  }
  int64_t c;
  HeadExchange qkv, out;
  kernels::AttnShape shape;  // the head-sharded sequence's (the whole one at a2a)
  ContextParallel ring;      // size 1 for a2a
};

void check_shape(const kernels::AttnShape& s) {
  MT_ASSERT(s.Sq == s.Sk && s.Sq % 2 == 0 && !s.fused_qkv,
            "context-parallel attention takes two equal local chunks of packed q, k, v (S ", s.Sq,
            ")");
}

}  // namespace

void context_attention_forward(const kernels::Ctx& ctx,
                               const ContextParallel& cp,
                               int64_t layer,
                               Arena& scratch,
                               float* out,
                               float* lse,
                               const float* q,
                               const float* k,
                               const float* v,
                               const kernels::AttnShape& s,
                               const kernels::AttnDropout& drop,
                               bool bf16_values) {
  const CpCommType t = cp.type(layer);
  if (t == CpCommType::kP2P) {
    ring_attention_forward(ctx, cp, scratch, out, lse, q, k, v, s, drop, bf16_values);
    return;
  }
  check_shape(s);
  if (t == CpCommType::kAllGather) {
    const GatheredKv kv(ctx, cp, scratch, k, v, s, bf16_values);
    for (int64_t h = 0; h < 2; ++h) {
      const GatheredChunk g(cp, s, drop, h);
      kernels::attention_forward(ctx, out + g.o, lse + g.lse, q + g.q, kv.k, kv.v, g.shape, g.mask);
    }
    return;
  }
  const HeadSharded x(cp, t, s);
  const HeadSharded::Qkv h = x.send_qkv(ctx, scratch, q, k, v, bf16_values);
  float* oh = x.alloc(scratch, x.o);
  ring_attention_forward(ctx, x.ring, scratch, oh, lse, h.q, h.k, h.v, x.shape, x.dropout(drop),
                         bf16_values);
  x.home(ctx, scratch, x.o, out, oh, false, bf16_values);
}

void context_attention_backward(const kernels::Ctx& ctx,
                                const ContextParallel& cp,
                                int64_t layer,
                                Arena& scratch,
                                float* dq,
                                float* dk,
                                float* dv,
                                const float* dout,
                                const float* q,
                                const float* k,
                                const float* v,
                                const float* out,
                                const float* lse,
                                const kernels::AttnShape& s,
                                const kernels::AttnDropout& drop,
                                bool bf16_values) {
  const CpCommType t = cp.type(layer);
  if (t == CpCommType::kP2P) {
    ring_attention_backward(ctx, cp, scratch, dq, dk, dv, dout, q, k, v, out, lse, s, drop,
                            bf16_values);
    return;
  }
  check_shape(s);
  if (t == CpCommType::kAllGather) {
    const GatheredKv kv(ctx, cp, scratch, k, v, s, bf16_values);
    float* dkf = scratch.alloc<float>(2 * cp.size * kv.kc);
    float* dvf = scratch.alloc<float>(2 * cp.size * kv.vc);
    kernels::fill_zero(ctx, dkf, kF * 2 * cp.size * kv.kc);
    kernels::fill_zero(ctx, dvf, kF * 2 * cp.size * kv.vc);
    for (int64_t h = 0; h < 2; ++h) {
      const GatheredChunk g(cp, s, drop, h);
      kernels::attention_backward(ctx, dq + g.q, dkf, dvf, dout + g.o, q + g.q, kv.k, kv.v,
                                  out + g.o, lse + g.lse, g.shape, g.mask);
    }
    reduce_scatter_sequence(ctx, cp, scratch, dk, dkf, kv.kc);
    reduce_scatter_sequence(ctx, cp, scratch, dv, dvf, kv.vc);
    return;
  }
  const HeadSharded x(cp, t, s);
  float *dqh = x.zeros(ctx, scratch, x.q), *dkh = x.zeros(ctx, scratch, x.k),
        *dvh = x.zeros(ctx, scratch, x.v);
  const HeadSharded::Qkv h = x.send_qkv(ctx, scratch, q, k, v, bf16_values);
  const float* oh = x.send(ctx, scratch, x.o, out, bf16_values);
  const float* doh = x.send(ctx, scratch, x.o, dout, bf16_values);
  ring_attention_backward(ctx, x.ring, scratch, dqh, dkh, dvh, doh, h.q, h.k, h.v, oh, lse, x.shape,
                          x.dropout(drop), bf16_values);
  x.home(ctx, scratch, x.q, dq, dqh, true, false);
  x.home(ctx, scratch, x.k, dk, dkh, true, false);
  x.home(ctx, scratch, x.v, dv, dvh, true, false);
}

WidenedQkv widen_qkv(const kernels::Ctx& ctx,
                     Arena& scratch,
                     const bf16* qkv,
                     int64_t rows,
                     int64_t H,
                     int64_t G,
                     int64_t D) {
  const int64_t n = rows * G * (H / G + 2) * D;
  float* wide = scratch.alloc<float>(n);
  kernels::convert(ctx, wide, qkv, n);
  const WidenedQkv w{scratch.alloc<float>(rows * H * D), scratch.alloc<float>(rows * G * D),
                     scratch.alloc<float>(rows * G * D)};
  kernels::qkv_split(ctx, w.q, w.k, w.v, wide, rows, G, H / G, D);
  return w;
}

bool attends_fused(const ContextParallel& cp, int64_t layer) {
  return cp.size == 1 || cp.type(layer) == CpCommType::kA2A ||
         cp.type(layer) == CpCommType::kA2AP2P;
}

namespace {

void check_fused(const ContextParallel& cp, int64_t layer) {
  MT_ASSERT(attends_fused(cp, layer), "attention in the fused layout: CP ", cp.size, " by ",
            cp_comm_name(cp.type(layer)));
}

// The bf16 ops over the fused layout's q, k, v, causal.
void attend_fused(
    const kernels::Ctx& ctx, bf16* out, float* lse, const bf16* qkv, const kernels::AttnShape& s) {
  const auto v = kernels::fused_qkv_views(qkv, s.H, s.G, s.D);
  kernels::attention_forward(ctx, out, lse, v.q, v.k, v.v, s, kernels::AttnMask{true, 0});
}
void attend_fused_backward(const kernels::Ctx& ctx,
                           bf16* dqkv,
                           const bf16* dout,
                           const FusedHeads& heads,
                           const float* lse,
                           const kernels::AttnShape& s) {
  const auto d = kernels::fused_qkv_views(dqkv, s.H, s.G, s.D);
  const auto v = kernels::fused_qkv_views(heads.qkv, s.H, s.G, s.D);
  kernels::attention_backward(ctx, d.q, d.k, d.v, dout, v.q, v.k, v.v, heads.out, lse, s,
                              kernels::AttnMask{true, 0});
}

}  // namespace

FusedHeads fused_attention_forward(const kernels::Ctx& ctx,
                                   const ContextParallel& cp,
                                   int64_t layer,
                                   Arena& keep,
                                   Arena& scratch,
                                   bf16* out,
                                   float* lse,
                                   const bf16* qkv,
                                   const kernels::AttnShape& s) {
  check_fused(cp, layer);
  if (cp.size == 1) {
    attend_fused(ctx, out, lse, qkv, s);
    return FusedHeads{qkv, out};
  }
  const FusedExchange x(cp, cp.type(layer), s);
  bf16* qkv_h = keep.alloc<bf16>(x.qkv.sharded_elems());
  x.qkv.seq_to_heads(ctx, scratch, qkv_h, qkv, DType::kBF16);
  bf16* out_h = keep.alloc<bf16>(x.out.sharded_elems());
  if (x.ring.size == 1) {
    attend_fused(ctx, out_h, lse, qkv_h, x.shape);
  } else {  // the ring over the groups, its K/V blocks as bf16; the output rounded as CP 1's
    const WidenedQkv w = widen_qkv(ctx, scratch, qkv_h, x.rows(), x.shape.H, x.shape.G, s.D);
    float* o = scratch.alloc<float>(x.out.sharded_elems());
    ring_attention_forward(ctx, x.ring, scratch, o, lse, w.q, w.k, w.v, x.packed(), {}, true);
    kernels::convert(ctx, out_h, o, x.out.sharded_elems());
  }
  x.out.heads_to_seq(ctx, scratch, out, out_h, DType::kBF16);
  return FusedHeads{qkv_h, out_h};
}

void fused_attention_backward(const kernels::Ctx& ctx,
                              const ContextParallel& cp,
                              int64_t layer,
                              Arena& scratch,
                              bf16* dqkv,
                              const bf16* dout,
                              const FusedHeads& heads,
                              const float* lse,
                              const kernels::AttnShape& s) {
  check_fused(cp, layer);
  if (cp.size == 1) {
    attend_fused_backward(ctx, dqkv, dout, heads, lse, s);
    return;
  }
  const FusedExchange x(cp, cp.type(layer), s);
  bf16* dout_h = scratch.alloc<bf16>(x.out.sharded_elems());
  x.out.seq_to_heads(ctx, scratch, dout_h, dout, DType::kBF16);
  bf16* dqkv_h = scratch.alloc<bf16>(x.qkv.sharded_elems());
  if (x.ring.size == 1) {
    attend_fused_backward(ctx, dqkv_h, dout_h, heads, lse, x.shape);
  } else {  // the ring's fp32 sums, rounded once into QKV's bf16 layout
    const WidenedQkv w = widen_qkv(ctx, scratch, heads.qkv, x.rows(), x.shape.H, x.shape.G, s.D);
    const int64_t no = x.out.sharded_elems(), nq = x.rows() * x.shape.H * s.D,
                  nk = x.rows() * x.shape.G * s.D;
    float *o = scratch.alloc<float>(no), *d = scratch.alloc<float>(no);
    kernels::convert(ctx, o, heads.out, no);
    kernels::convert(ctx, d, dout_h, no);
    float *dq = scratch.alloc<float>(nq), *dk = scratch.alloc<float>(nk),
          *dv = scratch.alloc<float>(nk);
    kernels::fill_zero(ctx, dq, kF * nq);
    kernels::fill_zero(ctx, dk, kF * nk);
    kernels::fill_zero(ctx, dv, kF * nk);
    ring_attention_backward(ctx, x.ring, scratch, dq, dk, dv, d, w.q, w.k, w.v, o, lse, x.packed(),
                            {}, true);
    kernels::qkv_merge_grad(ctx, dqkv_h, dq, dk, dv, x.rows(), x.shape.G, x.shape.H / x.shape.G,
                            s.D);
  }
  x.qkv.heads_to_seq(ctx, scratch, dqkv, dqkv_h, DType::kBF16);
}

}  // namespace mtron::parallel
