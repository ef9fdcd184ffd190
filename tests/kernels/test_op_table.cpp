// The op table (op_table.h) on every SIMD target this CPU runs, one test per target: a kernel
// that is right only on the best target fails here.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mtron::kernels::test
