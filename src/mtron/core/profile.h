// defines: OpCost, profile_enable, ProfileScope, MT_PROFILE, profile_report, format_profile
//
// A per-op wall-clock profile (`mtron train --profile`): each kernel entry point opens a scope
// with its name and its cost (FLOPs, bytes of memory traffic); when profiling is off a scope
// costs one branch. Scopes do not nest into each other's totals: the outermost scope on the calling
// thread owns the time. Ops run from one thread per process (OpenMP works inside them), so the
// counters need no locking. On CUDA the times are launch times unless the device synchronises.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtron {

// What one call of an op costs (kernels/dispatch.cpp computes it from the arguments): FLOPs,
// bytes it reads and writes in memory (each tensor once, at its type), and `min_bytes`, what
// the same work moves with activations in bf16, GEMM epilogues taking the bias and activation
// passes, and attention reading the fused QKV projection (no conversion or split copies).
struct OpCost {
  double flops = 0, bytes = 0, min_bytes = 0;
  double tensor_flops = 0;  // of flops, those of bf16 products outside GEMMs (attention's)
};

void profile_enable(bool on);
bool profile_enabled();

class ProfileScope {
 public:
  explicit ProfileScope(const char* name, OpCost cost = {});
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  int slot_ = -1;
  double t0_ = 0;
  OpCost cost_;
};

struct ProfileEntry {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
  OpCost cost{};  // summed over the calls
};
std::vector<ProfileEntry> profile_report();  // sorted by time, descending

// A table of the report: op, calls, seconds, share of `total_seconds`, GFLOP/s, GB/s.
std::string format_profile(const std::vector<ProfileEntry>& entries, double total_seconds);

}  // namespace mtron

#define MT_PROFILE_CAT2(a, b) a##b
#define MT_PROFILE_CAT(a, b) MT_PROFILE_CAT2(a, b)
#define MT_PROFILE(...) ::mtron::ProfileScope MT_PROFILE_CAT(mt_profile_, __LINE__)(__VA_ARGS__)
