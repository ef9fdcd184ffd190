#include "mtron/core/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "mtron/core/timer.h"

namespace mtron {
namespace {

struct Slot {
  const char* name;
  int64_t calls = 0;
  double seconds = 0;
  OpCost cost{};
};

bool g_enabled = false;
int g_depth = 0;
std::vector<Slot> g_slots;

int slot_of(const char* name) {
  for (size_t i = 0; i < g_slots.size(); ++i) {
    if (g_slots[i].name == name || std::strcmp(g_slots[i].name, name) == 0) return int(i);
  }
  g_slots.push_back({name});
  return int(g_slots.size()) - 1;
}

}  // namespace

void profile_enable(bool on) {
  g_enabled = on;
}
bool profile_enabled() {
  return g_enabled;
}

ProfileScope::ProfileScope(const char* name, OpCost cost) {
  if (!g_enabled || g_depth++ > 0) return;
  slot_ = slot_of(name);
  cost_ = cost;
  t0_ = now_seconds();
}

ProfileScope::~ProfileScope() {
  if (!g_enabled) return;
  --g_depth;
  if (slot_ < 0) return;
  Slot& s = g_slots[size_t(slot_)];
  s.seconds += now_seconds() - t0_;
  s.cost.flops += cost_.flops;
  s.cost.bytes += cost_.bytes;
  s.cost.min_bytes += cost_.min_bytes;
  s.cost.tensor_flops += cost_.tensor_flops;
  ++s.calls;
}

std::vector<ProfileEntry> profile_report() {
  std::vector<ProfileEntry> out;
  for (const Slot& s : g_slots) out.push_back({s.name, s.calls, s.seconds, s.cost});
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return out;
}

std::string format_profile(const std::vector<ProfileEntry>& entries, double total_seconds) {
  std::string out = fmt::format("{:<28} {:>9} {:>10} {:>7} {:>10} {:>8}\n", "op", "calls",
                                "seconds", "share", "GFLOP/s", "GB/s");
  double covered = 0;
  const auto rate = [](double x, double seconds) {
    return x > 0 && seconds > 0 ? fmt::format("{:.1f}", x / seconds / 1e9) : std::string();
  };
  for (const ProfileEntry& e : entries) {
    covered += e.seconds;
    out += fmt::format("{:<28} {:>9} {:>10.3f} {:>6.1f}% {:>10} {:>8}\n", e.name, e.calls,
                       e.seconds, 100.0 * e.seconds / total_seconds, rate(e.cost.flops, e.seconds),
                       rate(e.cost.bytes, e.seconds));
  }
  out += fmt::format("{:<28} {:>9} {:>10.3f} {:>6.1f}%\n", "(outside kernels)", "",
                     total_seconds - covered, 100.0 * (total_seconds - covered) / total_seconds);
  return out;
}

}  // namespace mtron
