// defines: profile_enable, ProfileScope, MT_PROFILE, profile_report, format_profile
//
// A per-op wall-clock profile (`mtron train --profile`): each kernel entry point opens a scope
// with its name (and FLOPs where they are defined); when profiling is off a scope costs one
// branch. Scopes do not nest into each other's totals: the outermost scope on the calling
// thread owns the time. Ops run from one thread per process (OpenMP works inside them), so the
// counters need no locking. On CUDA the times are launch times unless the device synchronises.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtron {

void profile_enable(bool on);
bool profile_enabled();

class ProfileScope {
 public:
  explicit ProfileScope(const char* name, double flops = 0);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  int slot_ = -1;
  double t0_ = 0, flops_ = 0;
};

struct ProfileEntry {
  std::string name;
  int64_t calls = 0;
  double seconds = 0, flops = 0;
};
std::vector<ProfileEntry> profile_report();  // sorted by time, descending

// A table of the report: op, calls, seconds, share of `total_seconds`, GFLOP/s.
std::string format_profile(const std::vector<ProfileEntry>& entries, double total_seconds);

}  // namespace mtron

#define MT_PROFILE_CAT2(a, b) a##b
#define MT_PROFILE_CAT(a, b) MT_PROFILE_CAT2(a, b)
#define MT_PROFILE(...) ::mtron::ProfileScope MT_PROFILE_CAT(mt_profile_, __LINE__)(__VA_ARGS__)
