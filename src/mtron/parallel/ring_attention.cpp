#include "mtron/parallel/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "mtron/core/error.h"
#include "mtron/core/profile.h"

namespace mtron::parallel {

namespace {

// Messages from the ring predecessor: K/V blocks and dK/dV partials, each in send order.
constexpr int kTagKV = 71;
constexpr int kTagDKV = 72;

// Sizes of one local chunk (half of this rank's rows).
struct Half {
  int64_t c;    // tokens per sequence in a chunk
  int64_t q;    // elements of a chunk of q / dq: c * B * H * D
  int64_t o;    // elements of a chunk of out / dout: c * B * H * Dv
  int64_t k;    // elements of a chunk of k: c * B * G * D
  int64_t v;    // elements of a chunk of v: c * B * G * Dv
  int64_t lse;  // elements of a chunk's lse: B * H * c
  kernels::AttnShape shape;
  // A ring block holds [k chunk 0 | k chunk 1 | v chunk 0 | v chunk 1] (or their gradients).
  int64_t block() const { return 2 * (k + v); }
};

Half half_of(const kernels::AttnShape& s) {
  MT_ASSERT(s.Sq == s.Sk && s.Sq % 2 == 0, "ring attention needs two equal local chunks (S ", s.Sq,
            ")");
  const int64_t c = s.Sq / 2;
  return Half{c,
              c * s.B * s.H * s.D,
              c * s.B * s.H * s.Dv,
              c * s.B * s.G * s.D,
              c * s.B * s.G * s.Dv,
              s.B * s.H * c,
              kernels::AttnShape{s.B, c, c, s.H, s.G, s.D, s.Dv, s.scale}};
}

// Which keys of global chunk kc queries of global chunk qc see: none (false), or all / causal;
// with the dropout of the pair (c tokens per chunk).
bool chunk_mask(
    int64_t qc, int64_t kc, int64_t c, const kernels::AttnDropout& drop, kernels::AttnMask* mask) {
  if (kc > qc) return false;
  *mask = kernels::AttnMask{kc == qc, 0, drop};
  mask->dropout.q0 = qc * c;
  mask->dropout.k0 = kc * c;
  return true;
}

// Online-softmax merge of a block's partial result into the accumulated one, per query row:
// lse = log(e^lse_acc + e^lse_blk), out = e^(lse_acc - lse) out_acc + e^(lse_blk - lse) out_blk.
// out_*[c, B, H, Dv], lse_*[B, H, c].
void merge_block(float* out_acc,
                 float* lse_acc,
                 const float* out_blk,
                 const float* lse_blk,
                 int64_t c,
                 int64_t B,
                 int64_t H,
                 int64_t Dv) {
  MT_PROFILE("cp.merge");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t s = 0; s < c; ++s) {
        const int64_t li = (b * H + h) * c + s;
        const float l1 = lse_acc[li], l2 = lse_blk[li];
        const float m = std::max(l1, l2);
        if (m == kNegInf) continue;  // both fully masked: out stays 0
        const float l = m + std::log(std::exp(l1 - m) + std::exp(l2 - m));
        const float w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
        float* o = out_acc + ((s * B + b) * H + h) * Dv;
        const float* ob = out_blk + ((s * B + b) * H + h) * Dv;
        for (int64_t d = 0; d < Dv; ++d) o[d] = w1 * o[d] + w2 * ob[d];
        lse_acc[li] = l;
      }
    }
  }
}

int64_t ring_next(const ContextParallel& cp) {
  return (cp.rank + 1) % cp.size;
}
int64_t ring_prev(const ContextParallel& cp) {
  return (cp.rank + cp.size - 1) % cp.size;
}

}  // namespace

void ring_attention_forward(const kernels::Ctx& ctx,
                            const ContextParallel& cp,
                            Arena& scratch,
                            float* out,
                            float* lse,
                            const float* q,
                            const float* k,
                            const float* v,
                            const kernels::AttnShape& s,
                            const kernels::AttnDropout& drop) {
  if (cp.size == 1) {
    kernels::attention_forward(ctx, out, lse, q, k, v, s, kernels::AttnMask{true, 0, drop});
    return;
  }
  const Half hf = half_of(s);
  const int64_t block = hf.block();
  float* cur = scratch.alloc<float>(block);
  float* nxt = scratch.alloc<float>(block);
  std::memcpy(cur, k, sizeof(float) * 2 * hf.k);
  std::memcpy(cur + 2 * hf.k, v, sizeof(float) * 2 * hf.v);
  float* blk_out = scratch.alloc<float>(hf.o);
  float* blk_lse = scratch.alloc<float>(hf.lse);
  bool have[2] = {false, false};

  for (int64_t step = 0; step < cp.size; ++step) {
    const int64_t src = (cp.rank - step + cp.size) % cp.size;  // owner of the block in `cur`
    std::unique_ptr<Request> rq, sq;
    if (step + 1 < cp.size) {  // pass the block on while computing with it
      rq = cp.comm->irecv(nxt, block, DType::kF32, int(ring_prev(cp)), kTagKV);
      sq = cp.comm->isend(cur, block, DType::kF32, int(ring_next(cp)), kTagKV);
    }
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 2; ++b) {
        kernels::AttnMask mask;
        const int64_t kc = b == 0 ? src : 2 * cp.size - 1 - src;
        if (!chunk_mask(cp.chunk(a), kc, hf.c, drop, &mask)) continue;
        float* o = out + a * hf.o;
        float* l = lse + a * hf.lse;
        const float* kb = cur + b * hf.k;
        const float* vb = cur + 2 * hf.k + b * hf.v;
        if (!have[a]) {
          kernels::attention_forward(ctx, o, l, q + a * hf.q, kb, vb, hf.shape, mask);
          have[a] = true;
        } else {
          kernels::attention_forward(ctx, blk_out, blk_lse, q + a * hf.q, kb, vb, hf.shape, mask);
          merge_block(o, l, blk_out, blk_lse, hf.c, s.B, s.H, s.Dv);
        }
      }
    }
    if (rq) {
      MT_PROFILE("cp.ring_wait");
      rq->wait();
      sq->wait();
      std::swap(cur, nxt);
    }
  }
  MT_ASSERT(have[0] && have[1], "ring attention: a local chunk saw no keys");
}

void ring_attention_backward(const kernels::Ctx& ctx,
                             const ContextParallel& cp,
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
                             const kernels::AttnDropout& drop) {
  if (cp.size == 1) {
    kernels::attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, s,
                                kernels::AttnMask{true, 0, drop});
    return;
  }
  const Half hf = half_of(s);
  const int64_t block = hf.block();
  float* cur = scratch.alloc<float>(block);
  float* nxt = scratch.alloc<float>(block);
  std::memcpy(cur, k, sizeof(float) * 2 * hf.k);
  std::memcpy(cur + 2 * hf.k, v, sizeof(float) * 2 * hf.v);
  // dK/dV partials of the block in `cur` ([dk chunk 0 | dk chunk 1 | dv 0 | dv 1]); two buffers,
  // since the one just sent stays untouched until its send completes.
  float* dkv[2] = {scratch.alloc<float>(block), scratch.alloc<float>(block)};
  std::unique_ptr<Request> dkv_send[2];

  for (int64_t step = 0; step < cp.size; ++step) {
    const int64_t src = (cp.rank - step + cp.size) % cp.size;
    std::unique_ptr<Request> rq, sq;
    if (step + 1 < cp.size) {
      rq = cp.comm->irecv(nxt, block, DType::kF32, int(ring_prev(cp)), kTagKV);
      sq = cp.comm->isend(cur, block, DType::kF32, int(ring_next(cp)), kTagKV);
    }
    // Where this step's dK/dV go: our own gradients for our own block; else the block's partial,
    // which starts (zero) here at step 1 and otherwise arrives from the predecessor.
    float* dkb = dk;
    float* dvb = dv;
    float* part = nullptr;
    if (step > 0) {
      part = dkv[step % 2];
      if (dkv_send[step % 2]) dkv_send[step % 2]->wait();
      if (step == 1) {
        std::memset(part, 0, sizeof(float) * block);
      } else {
        MT_PROFILE("cp.ring_wait");
        cp.comm->recv(part, block, DType::kF32, int(ring_prev(cp)), kTagDKV);
      }
      dkb = part;
      dvb = part + 2 * hf.k;
    }
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 2; ++b) {
        kernels::AttnMask mask;
        const int64_t kc = b == 0 ? src : 2 * cp.size - 1 - src;
        if (!chunk_mask(cp.chunk(a), kc, hf.c, drop, &mask)) continue;
        kernels::attention_backward(ctx, dq + a * hf.q, dkb + b * hf.k, dvb + b * hf.v,
                                    dout + a * hf.o, q + a * hf.q, cur + b * hf.k,
                                    cur + 2 * hf.k + b * hf.v, out + a * hf.o, lse + a * hf.lse,
                                    hf.shape, mask);
      }
    }
    if (part) {
      dkv_send[step % 2] = cp.comm->isend(part, block, DType::kF32, int(ring_next(cp)), kTagDKV);
    }
    if (rq) {
      MT_PROFILE("cp.ring_wait");
      rq->wait();
      sq->wait();
      std::swap(cur, nxt);
    }
  }
  // Our own block's partial has been round the ring: add it to our gradients.
  float* home = nxt;  // free: the K/V ring is done
  cp.comm->recv(home, block, DType::kF32, int(ring_prev(cp)), kTagDKV);
  for (int64_t i = 0; i < 2 * hf.k; ++i) dk[i] += home[i];
  for (int64_t i = 0; i < 2 * hf.v; ++i) dv[i] += home[2 * hf.k + i];
  for (auto& r : dkv_send) {
    if (r) r->wait();
  }
}

}  // namespace mtron::parallel
