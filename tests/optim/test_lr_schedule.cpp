// The learning-rate schedule of every --lr-decay-style against Megatron's
// OptimizerParamScheduler.get_lr written out independently (in samples), warmup included, and
// --lr-warmup-fraction as the flags turn it into warmup iterations.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mtron/optim/lr_schedule.h"
#include "mtron/train/args.h"
#include "train_flags.h"

namespace mtron::optim {
namespace {

constexpr double kPi = 3.14159265358979323846;

LrSchedule schedule(LrDecayStyle style, int64_t warmup, int64_t decay) {
  return LrSchedule{.lr = 3e-3,
                    .min_lr = 3e-4,
                    .warmup_init = 1e-5,
                    .warmup_samples = warmup,
                    .decay_samples = decay,
                    .style = style};
}

TEST(LrSchedule, WarmupRisesLinearlyFromTheInitialRate) {
  for (const LrDecayStyle style : {LrDecayStyle::kConstant, LrDecayStyle::kLinear,
                                   LrDecayStyle::kCosine, LrDecayStyle::kInverseSquareRoot}) {
    const LrSchedule s = schedule(style, 40, 400);
    EXPECT_DOUBLE_EQ(s.lr_at(0), 1e-5);
    EXPECT_DOUBLE_EQ(s.lr_at(10), 1e-5 + (3e-3 - 1e-5) * 10 / 40);
    EXPECT_DOUBLE_EQ(s.lr_at(40), 3e-3);  // the last warmup sample reaches lr
  }
}

TEST(LrSchedule, Constant) {
  const LrSchedule s = schedule(LrDecayStyle::kConstant, 0, 400);
  for (int64_t n : {0, 1, 200, 400, 10000}) EXPECT_DOUBLE_EQ(s.lr_at(n), 3e-3) << n;
}

TEST(LrSchedule, LinearDecaysToMinLrThenStays) {
  const LrSchedule s = schedule(LrDecayStyle::kLinear, 40, 400);
  for (int64_t n : {41, 100, 220, 399, 400}) {
    const double r = double(n - 40) / 360.0;
    EXPECT_NEAR(s.lr_at(n), 3e-4 + (1 - r) * (3e-3 - 3e-4), 1e-15) << n;
  }
  EXPECT_DOUBLE_EQ(s.lr_at(220), 3e-4 + 0.5 * (3e-3 - 3e-4));
  EXPECT_DOUBLE_EQ(s.lr_at(401), 3e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(5000), 3e-4);
}

TEST(LrSchedule, CosineDecaysToMinLrThenStays) {
  const LrSchedule s = schedule(LrDecayStyle::kCosine, 40, 400);
  for (int64_t n : {41, 130, 220, 310, 400}) {
    const double r = double(n - 40) / 360.0;
    EXPECT_NEAR(s.lr_at(n), 3e-4 + 0.5 * (std::cos(kPi * r) + 1) * (3e-3 - 3e-4), 1e-15) << n;
  }
  EXPECT_NEAR(s.lr_at(220), 3e-4 + 0.5 * (3e-3 - 3e-4), 1e-15);  // half way: the mean
  EXPECT_DOUBLE_EQ(s.lr_at(401), 3e-4);
}

TEST(LrSchedule, InverseSquareRootWithinTheDecay) {
  const LrSchedule s = schedule(LrDecayStyle::kInverseSquareRoot, 40, 100000);
  for (int64_t n : {41, 160, 640, 4000}) {
    EXPECT_NEAR(s.lr_at(n), 3e-3 * std::sqrt(40.0) / std::sqrt(double(n)), 1e-15) << n;
  }
  EXPECT_DOUBLE_EQ(s.lr_at(99000), 3e-4);  // floored at min_lr
  // Past the decay Megatron returns min_lr before it looks at the style.
  const LrSchedule short_decay = schedule(LrDecayStyle::kInverseSquareRoot, 40, 160);
  EXPECT_NEAR(short_decay.lr_at(160), 3e-3 / 2, 1e-15);
  EXPECT_DOUBLE_EQ(short_decay.lr_at(161), 3e-4);
  // Without warmup Megatron takes max(warmup, 1) and max(samples, 1).
  const LrSchedule w = schedule(LrDecayStyle::kInverseSquareRoot, 0, 100000);
  EXPECT_DOUBLE_EQ(w.lr_at(0), 3e-3);
  EXPECT_DOUBLE_EQ(w.lr_at(1), 3e-3);
  EXPECT_NEAR(w.lr_at(4), 3e-3 / 2, 1e-15);
}

// WSD: lr until the last wsd_decay_samples of the decay, then each annealing style; min_lr after.
TEST(LrSchedule, WsdHoldsThenAnneals) {
  LrSchedule s = schedule(LrDecayStyle::kWsd, 40, 400);
  s.wsd_decay_samples = 100;  // anneals over samples 301..400
  const auto want = [](WsdDecayStyle style, double r) {
    switch (style) {
      case WsdDecayStyle::kExponential:
        return 2.0 * std::pow(0.5, r) - 1.0;
      case WsdDecayStyle::kLinear:
        return 1.0 - r;
      case WsdDecayStyle::kCosine:
        return 0.5 * (std::cos(kPi * r) + 1.0);
      case WsdDecayStyle::kMinusSqrt:
        return 1.0 - std::sqrt(r);
    }
    return -1.0;
  };
  for (const WsdDecayStyle style : {WsdDecayStyle::kExponential, WsdDecayStyle::kLinear,
                                    WsdDecayStyle::kCosine, WsdDecayStyle::kMinusSqrt}) {
    s.wsd_style = style;
    EXPECT_DOUBLE_EQ(s.lr_at(20), 1e-5 + (3e-3 - 1e-5) * 20 / 40);             // warmup
    for (int64_t n : {41, 200, 300}) EXPECT_DOUBLE_EQ(s.lr_at(n), 3e-3) << n;  // stable
    for (int64_t n : {301, 325, 350, 399, 400}) {
      const double r = double(n - 300) / 100.0;
      EXPECT_NEAR(s.lr_at(n), 3e-4 + want(style, r) * (3e-3 - 3e-4), 1e-15) << n;
    }
    EXPECT_NEAR(s.lr_at(400), 3e-4, 1e-15);  // every style ends at min_lr
    EXPECT_DOUBLE_EQ(s.lr_at(401), 3e-4);
  }
}

// The schedule's warmup in samples, as Megatron's scheduler counts it (global batch 2 here):
// --lr-warmup-iters n: n x 2; --lr-warmup-fraction f: int(f x decay samples), the decay
// iterations defaulting to --train-iters.
int64_t warmup_samples(const std::vector<std::string>& extra) {
  train::TrainArgs a;
  EXPECT_TRUE(tests::parse_train_flags(
      "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 "
      "--micro-batch-size 2 --train-iters 90 --lr 1e-3 --mock-data --vocab-size 100",
      extra, 1, a));
  EXPECT_EQ(a.parallel.global_batch_size, 2);
  return a.schedule.warmup_samples;
}

// WSD's annealing phase from the flags: iterations x global batch, or samples.
TEST(LrSchedule, WsdFlags) {
  const char* base =
      "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 "
      "--micro-batch-size 2 --lr 1e-3 --mock-data --vocab-size 100 --lr-decay-style WSD ";
  train::TrainArgs a;
  ASSERT_TRUE(tests::parse_train_flags(
      std::string(base) + "--train-iters 90",
      {"--lr-wsd-decay-iters", "30", "--lr-wsd-decay-style", "minus_sqrt"}, 1, a));
  EXPECT_EQ(a.schedule.style, LrDecayStyle::kWsd);
  EXPECT_EQ(a.schedule.wsd_decay_samples, 60);
  EXPECT_EQ(a.schedule.wsd_style, WsdDecayStyle::kMinusSqrt);
  train::TrainArgs b;
  ASSERT_TRUE(tests::parse_train_flags(std::string(base) + "--train-samples 180",
                                       {"--lr-wsd-decay-samples", "50"}, 1, b));
  EXPECT_EQ(b.schedule.wsd_decay_samples, 50);
  EXPECT_EQ(b.schedule.wsd_style, WsdDecayStyle::kExponential);  // Megatron's default
}

TEST(LrSchedule, WarmupFractionOfTheDecayIterations) {
  EXPECT_EQ(warmup_samples({}), 0);
  EXPECT_EQ(warmup_samples({"--lr-warmup-iters", "7"}), 14);
  EXPECT_EQ(warmup_samples({"--lr-warmup-fraction", "0.1"}), 18);  // of --train-iters 90
  EXPECT_EQ(warmup_samples({"--lr-warmup-fraction", "0.25", "--lr-decay-iters", "50"}), 25);
}

}  // namespace
}  // namespace mtron::optim
