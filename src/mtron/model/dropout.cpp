#include "mtron/model/dropout.h"

#include "mtron/core/error.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::model {
namespace {

PhiloxKey dropout_key(const StepDropout& d, int64_t layer, std::string_view kind) {
  return rng_key(d.seed, str("dropout/", kind, "/layer ", layer, "/iteration ", d.iteration));
}

}  // namespace

void hidden_dropout(const RunCtx& rc,
                    const ModelConfig& cfg,
                    const StepDropout& d,
                    const int32_t* pos,
                    int64_t B,
                    int64_t N,
                    int64_t layer,
                    std::string_view kind,
                    float* x) {
  if (!d.on || cfg.hidden_dropout == 0.0f) return;
  const int64_t Nl = rc.tp.sp_rows(N);
  const int64_t row0 = rc.tp.sequence_parallel ? rc.tp.rank * Nl : 0;
  const kernels::DropoutRows rows{.p = cfg.hidden_dropout,
                                  .key = dropout_key(d, layer, kind),
                                  .width = cfg.hidden_size,
                                  .B = B,
                                  .row0 = row0,
                                  .sample0 = d.sample0,
                                  .S = cfg.seq_length};
  kernels::dropout(rc.k, x, pos + row0, Nl, rows);
}

kernels::AttnDropout attention_dropout(
    const RunCtx& rc, const ModelConfig& cfg, const StepDropout& d, int64_t layer, int64_t Hl) {
  if (!d.on || cfg.attention_dropout == 0.0f) return {};
  return kernels::AttnDropout{.p = cfg.attention_dropout,
                              .key = dropout_key(d, layer, "attention"),
                              .b0 = d.sample0,
                              .h0 = rc.tp.rank * Hl,
                              .H = cfg.num_attention_heads,
                              .q0 = 0,
                              .k0 = 0,
                              .S = cfg.seq_length};
}

}  // namespace mtron::model
