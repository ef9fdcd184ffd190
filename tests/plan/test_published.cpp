// Throughput against the published Megatron-Core rows (reference/megatron.md section 8):
// the plan for each row's model, GPU count, TP and PP (the other knobs searched, with
// --tp-comm-overlap as the README's runs used) must predict TFLOP/s/GPU within 10%.
#include <gtest/gtest.h>

#include <cstdio>

#include "util.h"

namespace mtron::plan {
namespace {

struct Row {
  const char* model;
  int64_t gpus, tp, pp, gbs;
  double tflops;
};

TEST(Published, MegatronCoreH100TableWithin10Percent) {
  const Row rows[] = {{"megatron-gpt-1.7b", 48, 1, 1, 192, 408.8},
                      {"megatron-gpt-16b", 192, 4, 1, 192, 489.1},
                      {"megatron-gpt-70b", 768, 8, 2, 384, 419.7}};
  for (const Row& r : rows) {
    const ModelConfig m = test::model(r.model);
    SearchOptions o;
    o.global_batch_size = r.gbs;
    o.tp = r.tp;
    o.pp = r.pp;
    o.cp = 1;
    o.tp_comm_overlap = true;
    const SearchResult res = test::plan(m, test::gpus("h100-sxm", r.gpus), o);
    ASSERT_FALSE(res.plans.empty()) << r.model;
    const Candidate& c = res.plans[0];
    const double err = c.time.tflops_per_device / r.tflops - 1;
    std::printf("%-20s %4lld GPUs %-40s predicted %6.1f TFLOP/s/GPU, published %6.1f (%+.1f%%)\n",
                r.model, (long long)r.gpus, layout_name(c.layout).c_str(), c.time.tflops_per_device,
                r.tflops, 100 * err);
    EXPECT_LT(std::abs(err), 0.10) << r.model << " " << layout_name(c.layout);
  }
}

}  // namespace
}  // namespace mtron::plan
