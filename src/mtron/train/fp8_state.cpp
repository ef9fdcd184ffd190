#include "mtron/train/fp8_state.h"

#include <string>
#include <vector>

namespace mtron::train {

void update_fp8_scales(model::Fp8State& fp8, ParallelState& ps) {
  std::vector<float> a = fp8.amaxes();
  const int64_t d = fp8.dense_amaxes(), e = int64_t(a.size()) - d;
  for (Comm* g : {&ps.tp(), &ps.dp_cp()})
    if (g->size() > 1 && d > 0) g->all_reduce(a.data(), d, ReduceOp::kMax);
  for (Comm* g : {&ps.etp(), &ps.edp()})
    if (g->size() > 1 && e > 0) g->all_reduce(a.data() + d, e, ReduceOp::kMax);
  fp8.update(a);
}

void add_fp8_states(checkpoint::ChunkState& c,
                    model::Fp8State& fp8,
                    const model::ParamBuffer& p,
                    bool experts) {
  for (int l = 0; l < fp8.size(); ++l) {
    if (fp8.expert(l) != experts || p.find(fp8.name(l)) < 0) continue;
    model::Fp8Scaling* s = fp8.scaling(l);
    for (int r = 0; r < 3; ++r) {
      const std::string key = "fp8." + fp8.name(l) + "." + model::fp8_role_name(model::Fp8Role(r));
      c.states.push_back(
          {key + ".amax_history", {int64_t(s[r].history.size())}, s[r].history.data()});
      c.states.push_back({key + ".scale", {1}, &s[r].scale});
    }
  }
}

}  // namespace mtron::train
