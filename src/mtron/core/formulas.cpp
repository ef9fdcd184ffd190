#include "mtron/core/formulas.h"

namespace mtron {

double flops_per_iteration(const ModelConfig& m, int64_t global_batch, int64_t padded_vocab) {
  const double B = double(global_batch), s = double(m.seq_length), h = double(m.hidden_size);
  const double L = double(m.num_layers);
  const double q = double(m.q_size()), kv = double(m.kv_size());
  const double f = m.swiglu ? 3.0 : 2.0;
  const double L_moe = double(m.num_moe_layers()), L_dense = L - L_moe;
  const double mlp = h * f *
                     (double(m.ffn()) * L_dense + (double(m.moe_ffn()) * double(m.moe_router_topk) +
                                                   double(m.moe_shared_expert_intermediate_size)) *
                                                      L_moe);
  const double attn = L * (h * (q + 2 * kv) + q * h);
  const double logits = h * double(padded_vocab);
  return 6.0 * B * s * (mlp + attn + logits) + 6.0 * B * s * s * q * L;
}

}  // namespace mtron
