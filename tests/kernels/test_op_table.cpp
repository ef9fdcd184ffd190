// The op table (op_table.h) on every SIMD target this CPU runs, one test per target: a kernel
// that is right only on the best target fails here.
#include <gtest/gtest.h>

#include <cstdlib>

#include "mtron/core/error.h"
#include "mtron/kernels/cpu_isa.h"
#include "op_table.h"

namespace mtron::kernels::test {
namespace {

class OpTable : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override { use_cpu_simd_target(""); }
};

TEST_P(OpTable, EveryOpMatchesTheReference) {
  use_cpu_simd_target(GetParam());
  ASSERT_EQ(cpu_simd_target(), GetParam());
  OpTableOptions options;
  options.print_all = false;
  EXPECT_EQ(run_op_table(Ctx{}, options), 0) << "on SIMD target " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Targets,
                         OpTable,
                         ::testing::ValuesIn(cpu_simd_targets()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The kernels run on the best target of the level in use (the dispatch itself reports which
// body runs); under MTRON_CPU_ISA (kernels.cpu_isa_cap_sse4) that is the capped level's target.
TEST(CpuIsa, TheDispatchRunsTheLevelsBestTarget) {
  const std::vector<std::string> targets = cpu_simd_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(cpu_simd_target(), targets.front());
  if (const char* env = std::getenv("MTRON_CPU_ISA"); env && std::string(env) == "sse4") {
    EXPECT_EQ(cpu_isa(), "sse4");
    EXPECT_EQ(cpu_simd_target(), "SSE4");
  }
  use_cpu_simd_target(targets.back());
  EXPECT_EQ(cpu_simd_target(), targets.back());
  use_cpu_simd_target("");
  EXPECT_EQ(cpu_simd_target(), targets.front());
  EXPECT_THROW(use_cpu_simd_target("AVX9"), Error);
}

}  // namespace
}  // namespace mtron::kernels::test
