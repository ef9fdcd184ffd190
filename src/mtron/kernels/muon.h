// defines: muon_momentum, scale_by_inverse_norm
//
// The elementwise parts of Muon's step (optim/muon.h), one pass each, with no host
// synchronisation:
//
// muon_momentum:         t = (grad[i] * grad_scale) * (1 - mu);  momentum[i] = momentum[i] * mu +
// t;
//                        update[i] = nesterov ? momentum[i] * mu + t : momentum[i]
//                        every product and sum rounded to fp32 on its own (no fused multiply-add):
//                        the arithmetic of the same steps as separate scale and add passes
// scale_by_inverse_norm: x[i] *= float(1 / max(sqrt(*sumsq), eps)), the factor computed in double
//                        from the sum of squares where sum_squares left it (on ctx's device), so
//                        that normalising by a norm needs no read back to the host
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

#define MT_PARAMS_muon_momentum                                                                  \
  (float* momentum, float* update, const float* grad, float grad_scale, float mu, bool nesterov, \
   int64_t n)
#define MTRON_MUON_OPS(OP)                                                                \
  OP(void, muon_momentum, muon_momentum, muon_momentum_contract, MT_PARAMS_muon_momentum, \
     (momentum, update, grad, grad_scale, mu, nesterov, n))                               \
  OP(void, scale_by_inverse_norm, scale_by_inverse_norm, scale_by_inverse_norm_contract,  \
     (float* x, const double* sumsq, double eps, int64_t n), (x, sumsq, eps, n))
MTRON_MUON_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
