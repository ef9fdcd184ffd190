#include "mtron/train/batch_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "mtron/core/error.h"

namespace mtron::train {
namespace {

// Megatron's _parse_numeric_value: a number with an optional K, M, B or T suffix, truncated.
int64_t parse_count(std::string s, const std::string& entry) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (!s.empty()) {
    const char suffix = s.back();
    mult = suffix == 'T'   ? 1e12
           : suffix == 'B' ? 1e9
           : suffix == 'M' ? 1e6
           : suffix == 'K' ? 1e3
                           : 1;
    if (mult != 1) s.pop_back();
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MT_CHECK(!s.empty() && used == s.size(), "--step-batch-size-schedule: invalid number in \"",
           entry, "\"");
  return int64_t(v * mult);
}

}  // namespace

BatchSchedule BatchSchedule::constant(int64_t global) {
  BatchSchedule b;
  b.global_ = global;
  return b;
}

BatchSchedule BatchSchedule::rampup(int64_t start,
                                    int64_t increment,
                                    int64_t samples,
                                    int64_t global) {
  MT_CHECK(start > 0, "--rampup-batch-size: start batch size should be positive, got ", start);
  MT_CHECK(increment > 0, "--rampup-batch-size: batch size increment should be positive, got ",
           increment);
  MT_CHECK(samples >= 0, "--rampup-batch-size: ramp-up samples should be non-negative, got ",
           samples);
  const int64_t diff = global - start;
  MT_CHECK(diff >= 0,
           "expected global batch size to be greater than or equal to start batch "
           "size, got ",
           global, " and ", start);
  MT_CHECK(diff % increment == 0, "expected global batch size interval (", diff,
           ") to be divisible by global batch size increment (", increment, ")");
  MT_CHECK(diff > 0, "--rampup-batch-size: the start batch size equals --global-batch-size (",
           global, "): nothing to ramp up");
  BatchSchedule b;
  b.global_ = global;
  b.rampup_ = {start, increment, samples};
  return b;
}

BatchSchedule BatchSchedule::steps(const std::string& schedule, int64_t seq_length) {
  std::string s = schedule;
  std::replace(s.begin(), s.end(), ',', ' ');
  std::istringstream in(s);
  BatchSchedule b;
  for (std::string entry; in >> entry;) {
    const size_t colon = entry.find(':');
    MT_CHECK(colon != std::string::npos, "--step-batch-size-schedule: invalid schedule entry \"",
             entry, "\". Expected format: \"THRESHOLD:BATCH_SIZE\"");
    const int64_t tokens = parse_count(entry.substr(0, colon), entry);
    const int64_t batch = parse_count(entry.substr(colon + 1), entry);
    b.steps_.emplace_back(tokens / seq_length, batch);
  }
  std::stable_sort(b.steps_.begin(), b.steps_.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  MT_CHECK(!b.steps_.empty(), "--step-batch-size-schedule: schedule must have at least one entry");
  MT_CHECK(b.steps_[0].first == 0,
           "--step-batch-size-schedule: first schedule entry must have threshold 0, got ",
           b.steps_[0].first);
  for (size_t i = 1; i < b.steps_.size(); ++i) {
    MT_CHECK(b.steps_[i].first > b.steps_[i - 1].first,
             "--step-batch-size-schedule: schedule thresholds must be strictly increasing, got ",
             b.steps_[i - 1].first, " before ", b.steps_[i].first, " (samples of ", seq_length,
             " tokens)");
  }
  for (const auto& [t, bs] : b.steps_)
    MT_CHECK(bs > 0, "--step-batch-size-schedule: batch size must be positive, got ", bs);
  b.global_ = b.steps_.back().second;
  return b;
}

int64_t BatchSchedule::batch_size_at(int64_t consumed) const {
  if (!rampup_.empty()) {
    if (consumed > rampup_[2]) return global_;
    const double per_increment = double(rampup_[2]) / double((global_ - rampup_[0]) / rampup_[1]);
    const int64_t steps = per_increment > 0 ? int64_t(double(consumed) / per_increment) : 0;
    return rampup_[0] + steps * rampup_[1];
  }
  if (!steps_.empty()) {
    int64_t bs = steps_[0].second;
    for (const auto& [threshold, b] : steps_) {
      if (consumed < threshold) break;
      bs = b;
    }
    return bs;
  }
  return global_;
}

int64_t BatchSchedule::final_batch_size() const {
  return global_;
}

int64_t BatchSchedule::iterations_for(int64_t train_samples) const {
  int64_t iterations = 0, consumed = 0;
  if (!rampup_.empty()) {
    // The ramp-up phase, then whole batches of the final size (a partial last one is dropped).
    while (consumed <= rampup_[2] && consumed <= train_samples) {
      consumed += batch_size_at(consumed);
      ++iterations;
    }
    if (train_samples > consumed) iterations += (train_samples - consumed) / global_;
    return iterations;
  }
  if (!steps_.empty()) {
    while (consumed < train_samples) {
      consumed += batch_size_at(consumed);
      ++iterations;
    }
    return iterations;
  }
  return train_samples / global_;
}

void BatchSchedule::validate(const ParallelConfig& par) const {
  const int64_t mbs = par.micro_batch_size, dp = par.dp();
  std::vector<int64_t> sizes = {global_};
  if (!rampup_.empty()) {
    for (int64_t b = rampup_[0]; b < global_; b += rampup_[1]) sizes.push_back(b);
  }
  for (const auto& [t, b] : steps_) sizes.push_back(b);
  for (int64_t b : sizes) {
    MT_CHECK(b % (mbs * dp) == 0, "current global batch size (", b,
             ") is not divisible by micro-batch-size (", mbs, ") times data parallel size (", dp,
             ")");
    try {
      par.check_microbatch_groups(b / (mbs * dp));
    } catch (const Error& e) {
      MT_CHECK(false, e.what(), " (global batch size ", b, ")");
    }
  }
}

std::string BatchSchedule::describe() const {
  if (!rampup_.empty()) {
    return fmt::format("ramp-up from {} by {} over {} samples to {}", rampup_[0], rampup_[1],
                       rampup_[2], global_);
  }
  if (!steps_.empty()) {
    std::string s = "step schedule";
    for (const auto& [t, b] : steps_) s += fmt::format(" {}:{}", t, b);
    return s + " (samples:batch)";
  }
  return fmt::format("constant {}", global_);
}

}  // namespace mtron::train
