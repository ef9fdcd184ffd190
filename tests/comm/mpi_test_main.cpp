#include "mpi_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mtron {
namespace {

Launch* g_launch = nullptr;  // test harness only: gtest's TEST bodies take no arguments

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }

 private:
  int rank_;
};

}  // namespace

Launch& mpi_test_launch() {
  return *g_launch;
}

}  // namespace mtron

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  mtron::MpiOptions opts;
  for (int i = 1; i < argc; ++i)
    if (!std::strncmp(argv[i], "--max-count=", 12)) opts.max_count = std::atoll(argv[i] + 12);
  return mtron::run_main(
      argc, argv,
      [](mtron::Launch& launch) {
        mtron::g_launch = &launch;
        launch.set_collective_timeout(120);
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        if (launch.rank() != 0) {
          delete listeners.Release(listeners.default_result_printer());
          listeners.Append(new mtron::FailurePrinter(launch.rank()));
        }
        const double failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
        const double any = launch.world().all_reduce_max(failed);
        if (launch.rank() == 0 && any > 0)
          std::fprintf(stderr, "FAILED on at least one rank (see [rank N] lines)\n");
        return any > 0 ? 1 : 0;
      },
      opts);
}
