// Launcher detection from the environment, and run_main without a launcher (one process, single
// backend: `mtron train` run directly).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "mtron/core/error.h"
#include "mtron/parallel/launch.h"

namespace mtron {
namespace {

Launcher detect(const std::map<std::string, std::string>& env) {
  return detect_launcher([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    detect(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Launch, DetectsTheLauncher) {
  EXPECT_EQ(detect({}), Launcher::kNone);
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "1"}}),
            Launcher::kMpirun);
  // mpirun inside an sbatch allocation: the Slurm variables of the batch step are ignored.
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "8"}, {"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "0"}}),
            Launcher::kMpirun);
  // srun --mpi=pmix.
  EXPECT_EQ(detect({{"PMIX_RANK", "3"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_PROCID", "3"}}),
            Launcher::kPmix);
  // The batch script itself (one process, SLURM_NTASKS describes the allocation).
  EXPECT_EQ(detect({{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "42"}}),
            Launcher::kNone);
  // srun -n 1 without PMIx is just one process.
  EXPECT_EQ(detect({{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"}}), Launcher::kNone);
}

TEST(Launch, RejectsLaunchesThatWouldTrainAlone) {
  // Plain srun (no PMIx): every task would be rank 0 of 1.
  const std::string srun = error_of({{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_PROCID", "2"}});
  EXPECT_NE(srun.find("srun started 8 tasks without PMIx"), std::string::npos) << srun;
  EXPECT_NE(srun.find("srun --mpi=pmix"), std::string::npos) << srun;
  // srun --mpi=pmi2 or MPICH's hydra: PMI-2, which Debian's Open MPI cannot use.
  const std::string pmi2 = error_of({{"PMI_SIZE", "4"}, {"PMI_RANK", "0"}});
  EXPECT_NE(pmi2.find("PMI-1/PMI-2"), std::string::npos) << pmi2;
}

TEST(Launch, RunMainWithoutLauncherUsesTheSingleBackend) {
  char arg0[] = "mtron";
  char* argv[] = {arg0, nullptr};
  int seen_size = 0;
  std::string backend;
  EXPECT_EQ(run_main(1, argv,
                     [&](Launch& l) {
                       seen_size = l.size();
                       backend = l.world().backend();
                       return 0;
                     }),
            0);
  EXPECT_EQ(seen_size, 1);
  EXPECT_EQ(backend, "single");
  // A user error prints one line and returns 2; anything else returns 1.
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_main(1, argv, [](Launch&) -> int { MT_CHECK(false, "--foo is not a flag"); }), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "[mtron r0/1] error: --foo is not a flag\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_main(1, argv, [](Launch&) -> int { throw std::runtime_error("boom"); }), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "[mtron r0/1] error: boom\n");
}

}  // namespace
}  // namespace mtron
