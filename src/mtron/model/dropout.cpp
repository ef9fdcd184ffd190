#include "mtron/model/dropout.h"

#include "mtron/core/error.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/model/layer.h"

namespace mtron::model {
namespace {

PhiloxKey dropout_key(const StepDropout& d, int64_t layer, std::string_view kind) {
  return rng_key(d.seed, str("dropout/", kind, "/layer ", layer, "/iteration ", d.iteration));
}

}  // namespace

bool hidden_dropout_on(const ModelConfig& cfg, const TokenLayout& tl) {
  return tl.drop.on && cfg.hidden_dropout != 0.0f;
}

void hidden_dropout(
    const RunCtx& rc, const ModelConfig& cfg, const TokenLayout& tl, DropoutSite site, float* x) {
  const StepDropout& d = tl.drop;
  if (!hidden_dropout_on(cfg, tl)) return;
  const int64_t N = tl.rows(), Nl = rc.tp.sp_rows(N);
  const int64_t row0 = rc.tp.sequence_parallel ? rc.tp.rank * Nl : 0;
  const kernels::DropoutRows rows{.p = cfg.hidden_dropout,
                                  .key = dropout_key(d, site.layer, site.kind),
                                  .width = cfg.hidden_size,
                                  .B = tl.B,
                                  .row0 = row0,
                                  .sample0 = d.sample0,
                                  .S = cfg.seq_length};
  kernels::dropout(rc.k, x, tl.pos + row0, Nl, rows);
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
