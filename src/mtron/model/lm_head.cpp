#include "mtron/model/lm_head.h"

#include <algorithm>

#include "mtron/core/formulas.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm_operand.h"
#include "mtron/parallel/cross_entropy.h"

namespace mtron::model {

using kernels::Trans;

void lm_head_loss(const RunCtx& rc, Arena& scratch, const LmHeadArgs& a) {
  const bool train = a.dh != nullptr;
  const int64_t R = lm_head_rows_per_chunk(a.Vl, kernels::chunk_elems(rc.k.device));
  // In bf16 mode the GEMM writes bf16 logits (unless the caller wants fp32 ones) and the
  // backward writes their gradient over them, the dgrad and wgrad GEMMs' input.
  const bool logits16 = bf16_gemm_inputs(rc) && !a.logits;
  float* logits = logits16 ? nullptr : scratch.alloc<float>(R * a.Vl);
  bf16* l16 = logits16 ? scratch.alloc<bf16>(R * a.Vl) : nullptr;
  const GemmInputRoom dlogits_room =
      train && !logits16 ? gemm_input_room(rc, scratch, R * a.Vl) : GemmInputRoom{};
  parallel::VocabParallelCrossEntropy xent(rc.k, rc.tp, scratch, R, a.dloss);

  for (int64_t r0 = 0; r0 < a.N; r0 += R) {
    const int64_t n = std::min(R, a.N - r0);
    const Act hc = a.h.at(r0 * a.hidden);
    const int32_t* tg = a.targets + r0;
    const float* mask = a.mask ? a.mask + r0 : nullptr;
    if (logits16) {
      kernels::gemm_bias(rc.k, Trans::kN, Trans::kT, n, a.Vl, a.hidden, hc, a.hidden, a.w, a.hidden,
                         l16, nullptr);
      xent.forward(l16, tg, n, a.Vl, a.col_start, a.vocab_valid, a.loss_sum, mask);
    } else {
      kernels::gemm(rc.k, Trans::kN, Trans::kT, n, a.Vl, a.hidden, 1.0f, hc, a.hidden, a.w,
                    a.hidden, 0.0f, logits, a.Vl);
      if (a.logits) {
        kernels::copy(rc.k, a.logits + r0 * a.Vl, logits, int64_t(sizeof(float)) * n * a.Vl);
      }
      xent.forward(logits, tg, n, a.Vl, a.col_start, a.vocab_valid, a.loss_sum, mask);
    }
    if (!train) continue;
    Act g;
    if (logits16) {
      xent.backward(l16, l16, tg, n, a.Vl, a.col_start, a.vocab_valid);
      g = Act::of(l16);
    } else if (bf16_gemm_inputs(rc)) {  // the backward writes the GEMMs' bf16 input itself
      bf16* dlogits = static_cast<bf16*>(dlogits_room.data);
      xent.backward(dlogits, logits, tg, n, a.Vl, a.col_start, a.vocab_valid);
      g = Act::of(dlogits);
    } else {
      xent.backward(logits, logits, tg, n, a.Vl, a.col_start, a.vocab_valid);
      g = as_gemm_input(rc, dlogits_room, logits, n * a.Vl);
    }
    kernels::gemm(rc.k, Trans::kN, Trans::kN, n, a.hidden, a.Vl, 1.0f, g, a.Vl, a.w, a.hidden, 0.0f,
                  a.dh + r0 * a.hidden, a.hidden);
    kernels::gemm(rc.k, Trans::kT, Trans::kN, a.Vl, a.hidden, n, 1.0f, g, a.Vl, hc, a.hidden, 1.0f,
                  a.dw, a.hidden);
  }
}

}  // namespace mtron::model
