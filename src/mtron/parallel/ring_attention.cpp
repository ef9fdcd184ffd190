#include "mtron/parallel/ring_attention.h"

#include <memory>
#include <utility>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/elementwise.h"

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
  MT_ASSERT(!s.fused_qkv, "ring attention takes q, k, v packed, not in the fused QKV layout");
  const int64_t c = s.Sq / 2;
  return Half{c,
              c * s.B * s.H * s.D,
              c * s.B * s.H * s.Dv,
              c * s.B * s.G * s.D,
              c * s.B * s.G * s.Dv,
              s.B * s.H * c,
              kernels::AttnShape{s.B, c, c, s.H, s.G, s.D, s.Dv, s.scale, s.bf16_products, false,
                                 s.own_kernels, s.nondeterministic}};
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

int64_t ring_next(const ContextParallel& cp) {
  return (cp.rank + 1) % cp.size;
}
int64_t ring_prev(const ContextParallel& cp) {
  return (cp.rank + cp.size - 1) % cp.size;
}

// The K/V blocks going round the ring: `cur` (held, and passed on) and `nxt` (arriving), each
// [k chunk 0 | k chunk 1 | v chunk 0 | v chunk 1], in fp32 or, where K and V hold bf16 values,
// in bf16 (half the bytes, exactly) with an fp32 copy of an arrived block for the kernels. The
// kernels read this rank's own block (the first step's) where k and v lie.
class KvRing {
 public:
  KvRing(const kernels::Ctx& ctx,
         const ContextParallel& cp,
         Arena& scratch,
         const float* k,
         const float* v,
         const Half& hf,
         bool bf16_kv)
      : ctx_(ctx),
        cp_(cp),
        hf_(hf),
        n_(hf.block()),
        wire_(bf16_kv ? DType::kBF16 : DType::kF32),
        k_(k),
        v_(v) {
    if (bf16_kv) {
      bf16* cur = scratch.alloc<bf16>(n_);
      kernels::convert(ctx, cur, k, 2 * hf.k);
      kernels::convert(ctx, cur + 2 * hf.k, v, 2 * hf.v);
      cur_ = cur;
      nxt_ = scratch.alloc<bf16>(n_);
      work_ = scratch.alloc<float>(n_);
    } else {
      float* cur = scratch.alloc<float>(n_);
      kernels::copy(ctx, cur, k, int64_t(sizeof(float)) * 2 * hf.k);
      kernels::copy(ctx, cur + 2 * hf.k, v, int64_t(sizeof(float)) * 2 * hf.v);
      cur_ = cur;
      nxt_ = scratch.alloc<float>(n_);
    }
  }
  // Chunk b's keys and values of the block held.
  const float* k(int64_t b) const { return k_ + b * hf_.k; }
  const float* v(int64_t b) const { return v_ + b * hf_.v; }

  // Posts this step's exchange (the block held to the successor, the predecessor's into `nxt`)
  // to `reqs` and starts it: NCCL defers posted sends and receives to the first wait or test,
  // and started now, the exchange runs beside the step's attention.
  void post(std::vector<std::unique_ptr<Request>>* reqs) {
    reqs->push_back(cp_.comm->irecv(nxt_, n_, wire_, int(ring_prev(cp_)), kTagKV));
    reqs->push_back(cp_.comm->isend(cur_, n_, wire_, int(ring_next(cp_)), kTagKV));
    reqs->back()->test();
  }
  // After the exchange: the block that arrived is held.
  void advance() {
    std::swap(cur_, nxt_);
    const float* held = static_cast<const float*>(cur_);
    if (wire_ == DType::kBF16) {
      kernels::convert(ctx_, work_, static_cast<const bf16*>(cur_), n_);
      held = work_;
    }
    k_ = held;
    v_ = held + 2 * hf_.k;
  }

 private:
  const kernels::Ctx& ctx_;
  const ContextParallel& cp_;
  Half hf_;
  int64_t n_;
  DType wire_;
  void *cur_, *nxt_;
  float* work_ = nullptr;
  const float *k_, *v_;
};

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
                            const kernels::AttnDropout& drop,
                            bool bf16_kv) {
  if (cp.size == 1) {
    kernels::attention_forward(ctx, out, lse, q, k, v, s, kernels::AttnMask{true, 0, drop});
    return;
  }
  const Half hf = half_of(s);
  KvRing kv(ctx, cp, scratch, k, v, hf, bf16_kv);
  float* blk_out = scratch.alloc<float>(hf.o);
  float* blk_lse = scratch.alloc<float>(hf.lse);
  bool have[2] = {false, false};

  for (int64_t step = 0; step < cp.size; ++step) {
    const int64_t src = (cp.rank - step + cp.size) % cp.size;  // owner of the block in `cur`
    std::vector<std::unique_ptr<Request>> reqs;
    if (step + 1 < cp.size) kv.post(&reqs);  // passed on while in use
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 2; ++b) {
        kernels::AttnMask mask;
        const int64_t kc = b == 0 ? src : 2 * cp.size - 1 - src;
        if (!chunk_mask(cp.chunk(a), kc, hf.c, drop, &mask)) continue;
        float* o = out + a * hf.o;
        float* l = lse + a * hf.lse;
        if (!have[a]) {
          kernels::attention_forward(ctx, o, l, q + a * hf.q, kv.k(b), kv.v(b), hf.shape, mask);
          have[a] = true;
        } else {
          kernels::attention_forward(ctx, blk_out, blk_lse, q + a * hf.q, kv.k(b), kv.v(b),
                                     hf.shape, mask);
          kernels::attention_merge(ctx, o, l, blk_out, blk_lse, hf.shape);
        }
      }
    }
    MT_PROFILE("cp.ring_wait");
    for (auto& r : reqs) r->wait();
    if (step + 1 < cp.size) kv.advance();
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
                             const kernels::AttnDropout& drop,
                             bool bf16_kv) {
  if (cp.size == 1) {
    kernels::attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, s,
                                kernels::AttnMask{true, 0, drop});
    return;
  }
  const Half hf = half_of(s);
  const int64_t block = hf.block();
  KvRing kv(ctx, cp, scratch, k, v, hf, bf16_kv);
  // dK/dV partials ([dk chunk 0 | dk chunk 1 | dv 0 | dv 1]) of the block in `cur`, from step 1
  // on: part[step % 2]; the partial of the next step's block arrives in the other one.
  float* part[2] = {scratch.alloc<float>(block), scratch.alloc<float>(block)};
  kernels::fill_zero(ctx, part[1], int64_t(sizeof(float)) * block);

  for (int64_t step = 0; step < cp.size; ++step) {
    const int64_t src = (cp.rank - step + cp.size) % cp.size;
    // Each step posts, to the successor and from the predecessor alike, the K/V block and then
    // the dK/dV partial, and waits for all of them at its end: every pair of ranks matches its
    // messages in the order they were posted (as NCCL does, which has no tags).
    std::vector<std::unique_ptr<Request>> reqs;
    if (step + 1 < cp.size) kv.post(&reqs);
    // Where this step's dK/dV go: our own gradients for our own block, else the block's partial
    // (zero at step 1, from the predecessor after that).
    float* dkb = step == 0 ? dk : part[step % 2];
    float* dvb = step == 0 ? dv : part[step % 2] + 2 * hf.k;
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 2; ++b) {
        kernels::AttnMask mask;
        const int64_t kc = b == 0 ? src : 2 * cp.size - 1 - src;
        if (!chunk_mask(cp.chunk(a), kc, hf.c, drop, &mask)) continue;
        kernels::attention_backward(ctx, dq + a * hf.q, dkb + b * hf.k, dvb + b * hf.v,
                                    dout + a * hf.o, q + a * hf.q, kv.k(b), kv.v(b), out + a * hf.o,
                                    lse + a * hf.lse, hf.shape, mask);
      }
    }
    if (step > 0) {
      // Our partial goes on; the predecessor's is the next step's block's (after the last step:
      // our own block's, which has been round the ring).
      float* next = part[(step + 1) % 2];
      reqs.push_back(
          cp.comm->isend(part[step % 2], block, DType::kF32, int(ring_next(cp)), kTagDKV));
      reqs.push_back(cp.comm->irecv(next, block, DType::kF32, int(ring_prev(cp)), kTagDKV));
    }
    MT_PROFILE("cp.ring_wait");
    for (auto& r : reqs) r->wait();
    if (step + 1 < cp.size) kv.advance();
  }
  // Our own block's partial, home after the last step: add it to our gradients.
  const float* home = part[cp.size % 2];
  kernels::add(ctx, dk, dk, home, 2 * hf.k);
  kernels::add(ctx, dv, dv, home + 2 * hf.k, 2 * hf.v);
}

}  // namespace mtron::parallel
