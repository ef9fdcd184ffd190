// The single-process backend: identities, copies, and what a group of one refuses.
#include <gtest/gtest.h>

#include <vector>

#include "mtron/comm/single.h"
#include "mtron/core/error.h"

namespace mtron {
namespace {

TEST(SingleComm, CollectivesAreIdentitiesOrCopies) {
  auto c = make_single_comm();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> x{1, 2, 3}, y(3, 0);
  c->all_reduce(x.data(), 3, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3}));
  c->all_gather(x.data(), y.data(), 3, DType::kF32);
  EXPECT_EQ(y, x);
  std::vector<float> z(3, 0);
  c->reduce_scatter(x.data(), z.data(), 3, DType::kF32, ReduceOp::kMax);
  EXPECT_EQ(z, x);
  const int64_t sc = 2, sd = 1, rc = 2, rd = 0;
  std::vector<float> w(3, 0);
  c->all_to_all_v(x.data(), &sc, &sd, w.data(), &rc, &rd, DType::kF32);
  EXPECT_EQ(w, (std::vector<float>{2, 3, 0}));
  EXPECT_TRUE(c->iall_reduce(x.data(), 3, DType::kF32, ReduceOp::kSum)->test());
  EXPECT_EQ(c->bytes_sent(), 0);
}

TEST(SingleComm, SplitAndSelfMessages) {
  auto c = make_single_comm();
  EXPECT_NE(c->split(0, 0), nullptr);
  EXPECT_EQ(c->split(-1, 0), nullptr);
  float v = 0;
  EXPECT_THROW(c->send(&v, 1, DType::kF32, 0, 0), InternalError);
}

}  // namespace
}  // namespace mtron
