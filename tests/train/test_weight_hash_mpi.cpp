// replica_mismatches under mpirun, the world as the replica group: equal parameters on every
// rank give no mismatch; one element changed on the last rank names that parameter, on every
// rank, in fp32 and through the bf16 compute copy; the TP-replicated-only check skips the
// TP-sharded parameter.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpi_test_main.h"
#include "mtron/train/weight_hash.h"

namespace mtron::train {
namespace {

TEST(WeightHash, AChangedReplicaIsNamedOnEveryRank) {
  Comm& world = mpi_test_launch().world();
  for (const Precision prec : {Precision::kFP32, Precision::kBF16}) {
    SCOPED_TRACE(prec == Precision::kBF16 ? "bf16" : "fp32");
    model::ParamBuffer p;
    p.add(model::ParamSpec{.name = "norm.weight",
                           .global_shape = {8},
                           .local_shape = {8},
                           .init = model::ParamInit::kOnes});
    p.add(model::sharded_spec("proj.weight", {8, 8}, 0, 0, 2, 0.02f));
    p.allocate(prec, 1);
    p.init(7);
    EXPECT_TRUE(replica_mismatches({}, p, world).empty());
    if (world.rank() == world.size() - 1) {
      p.master(1)[3] += 0.5f;
      p.refresh_compute();
    }
    const std::vector<std::string> want =
        world.size() > 1 ? std::vector<std::string>{"proj.weight"} : std::vector<std::string>{};
    EXPECT_EQ(replica_mismatches({}, p, world), want);
    EXPECT_TRUE(replica_mismatches({}, p, world, true).empty());
    if (world.rank() == world.size() - 1) {
      p.master(0)[0] = 2.0f;
      p.refresh_compute();
    }
    const std::vector<std::string> norm =
        world.size() > 1 ? std::vector<std::string>{"norm.weight"} : std::vector<std::string>{};
    EXPECT_EQ(replica_mismatches({}, p, world, true), norm);
  }
}

}  // namespace
}  // namespace mtron::train
