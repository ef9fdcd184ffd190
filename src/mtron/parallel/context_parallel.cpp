#include "mtron/parallel/context_parallel.h"

#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/elementwise.h"
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
  // Room for n elements of the wire's type.
  void* alloc(Arena& scratch, int64_t n) const {
    return es == 2 ? static_cast<void*>(scratch.alloc<bf16>(n))
                   : static_cast<void*>(scratch.alloc<float>(n));
  }
  DType dtype;
  int64_t es;
  const void* data;
};

// One tensor of this rank: its two local chunks of c tokens for B sequences, H heads of W floats.
struct Rows {
  int64_t c, B, H, W;
  int64_t chunk() const { return c * B * H * W; }  // elements of one local chunk
};

// The heads' all-to-all over group g (a ranks). seq_to_heads sends rank j heads
// [j H/a, (j+1) H/a) of both local chunks; what arrives is the group's chunks for this rank's
// heads in sequence order, [2ac, B, H/a, W]: the first chunks of ranks 0..a-1, then the second
// chunks of ranks a-1..0 (rank r of the group holds chunks r and 2a-1-r of the group's 2a).
// heads_to_seq is its inverse, adding into dst when `add`.
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

  // With `narrow` (src holds bf16 values) the exchange moves bf16, exactly.
  void seq_to_heads(
      const kernels::Ctx& ctx, Arena& scratch, float* dst, const float* src, bool narrow) const {
    const Wire w(ctx, scratch, narrow, src, 2 * r.chunk());
    void* buf = w.alloc(scratch, a * piece);
    void* to = narrow ? w.alloc(scratch, 2 * a * piece) : dst;
    for (int64_t h = 0; h < 2; ++h) {
      pack(ctx, buf, w.data, h, w.es);
      MT_PROFILE("cp.all_to_all");
      g.all_to_all_v(buf, counts.data(), packed.data(), to, counts.data(), sharded[h].data(),
                     w.dtype);
    }
    if (narrow) kernels::convert(ctx, dst, static_cast<const bf16*>(to), 2 * a * piece);
  }
  // The inverse, adding into dst when `add`; with `narrow` (not with `add`) src is rounded to
  // bf16 for the exchange.
  void heads_to_seq(const kernels::Ctx& ctx,
                    Arena& scratch,
                    float* dst,
                    const float* src,
                    bool add,
                    bool narrow) const {
    MT_ASSERT(!(add && narrow), "the heads' all-to-all adds fp32 values only");
    const Wire w(ctx, scratch, narrow, src, 2 * a * piece);
    void* buf = w.alloc(scratch, a * piece);
    void* out = dst;
    if (add) out = scratch.alloc<float>(2 * r.chunk());
    if (narrow) out = w.alloc(scratch, 2 * r.chunk());
    for (int64_t h = 0; h < 2; ++h) {
      {
        MT_PROFILE("cp.all_to_all");
        g.all_to_all_v(w.data, counts.data(), sharded[h].data(), buf, counts.data(), packed.data(),
                       w.dtype);
      }
      unpack(ctx, out, buf, h, w.es);
    }
    if (narrow) kernels::convert(ctx, dst, static_cast<const bf16*>(out), 2 * r.chunk());
    if (add) kernels::add(ctx, dst, dst, static_cast<const float*>(out), 2 * r.chunk());
  }

  Comm& g;
  Rows r;
  int64_t a, hs, piece;
  std::vector<int64_t> counts, packed, sharded[2];
};

// a2a and a2a+p2p: the heads' all-to-all over `group`, then ring attention over `ring` (the
// groups' ring; of size 1 for a2a) on the head-sharded sequence.
struct HeadSharded {
  HeadSharded(const ContextParallel& cp, CpCommType t, const kernels::AttnShape& s)
      : group(t == CpCommType::kA2A ? *cp.comm : *cp.a2a_level),
        c(s.Sq / 2),
        q(group, Rows{c, s.B, s.H, s.D}),
        k(group, Rows{c, s.B, s.G, s.D}),
        v(group, Rows{c, s.B, s.G, s.Dv}),
        o(group, Rows{c, s.B, s.H, s.Dv}),
        shape(s) {
    const int64_t a = group.size();
    if (t == CpCommType::kA2AP2P) {
      MT_ASSERT(cp.ring_level && cp.ring_level->size() * a == cp.size &&
                    cp.ring_level->rank() == cp.rank / a && group.rank() == cp.rank % a,
                "a2a+p2p: the hierarchical groups do not match CP rank ", cp.rank);
      ring = ContextParallel(cp.ring_level, cp.ring_level->rank(), cp.ring_level->size());
    }
    shape.Sq = shape.Sk = 2 * a * c;
    shape.H = s.H / a;
    shape.G = s.G / a;
  }
  kernels::AttnDropout dropout(kernels::AttnDropout d) const {
    d.h0 += group.rank() * shape.H;
    return d;
  }
  // A head-sharded buffer for q, k, v or out (or its gradient), zeroed or the exchange of `src`.
  float* alloc(Arena& scratch, const HeadExchange& x) const {
    return scratch.alloc<float>(2 * x.a * x.piece);
  }
  float* zeros(const kernels::Ctx& ctx, Arena& scratch, const HeadExchange& x) const {
    float* p = alloc(scratch, x);
    kernels::fill_zero(ctx, p, kF * 2 * x.a * x.piece);
    return p;
  }
  float* send(const kernels::Ctx& ctx,
              Arena& scratch,
              const HeadExchange& x,
              const float* src,
              bool narrow) const {
    float* p = alloc(scratch, x);
    x.seq_to_heads(ctx, scratch, p, src, narrow);
    return p;
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
  void* ranks = w.alloc(scratch, 2 * cp.size * chunk);  // rank-major
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
  x.o.heads_to_seq(ctx, scratch, out, oh, false, bf16_values);
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
  x.q.heads_to_seq(ctx, scratch, dq, dqh, true, false);
  x.k.heads_to_seq(ctx, scratch, dk, dkh, true, false);
  x.v.heads_to_seq(ctx, scratch, dv, dvh, true, false);
}

}  // namespace mtron::parallel
