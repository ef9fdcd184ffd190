#include "mtron/train/expert_bias.h"

#include <algorithm>

namespace mtron::train {

double update_expert_bias(std::vector<std::unique_ptr<model::GPTChunk>>& chunks,
                          const ParallelState& ps,
                          float rate) {
  std::vector<model::MoELayer*> layers;
  for (auto& c : chunks)
    for (model::MoELayer* l : c->moe_layers()) layers.push_back(l);
  if (layers.empty()) return 0;
  std::vector<double> counts;
  for (model::MoELayer* l : layers)
    counts.insert(counts.end(), l->tokens_per_expert().begin(), l->tokens_per_expert().end());
  ps.group(GroupKind::kTPDPCP)
      .all_reduce(counts.data(), int64_t(counts.size()), DType::kF64, ReduceOp::kSum);
  const double* at = counts.data();
  double hash = 0;
  for (model::MoELayer* l : layers) {
    std::vector<float>& bias = l->expert_bias();
    const size_t E = bias.size();
    double mean = 0;
    for (size_t e = 0; e < E; ++e) mean += at[e];
    mean /= double(E);
    for (size_t e = 0; e < E; ++e) {
      const double offset = mean - at[e];
      bias[e] += float(offset > 0 ? 1 : offset < 0 ? -1 : 0) * rate;
    }
    std::fill(l->tokens_per_expert().begin(), l->tokens_per_expert().end(), 0.0);
    for (size_t e = 0; e < E; ++e) hash += double(l->layer() + 1) * double(e + 1) * bias[e];
    at += E;
  }
  return hash;
}

}  // namespace mtron::train
