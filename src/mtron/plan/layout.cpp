#include "mtron/plan/layout.h"

#include <fmt/core.h>

#include "mtron/core/error.h"

namespace mtron::plan {

std::string_view recompute_name(RecomputeGranularity r) {
  switch (r) {
    case RecomputeGranularity::kNone:
      return "none";
    case RecomputeGranularity::kSelective:
      return "selective";
    case RecomputeGranularity::kFull:
      return "full";
  }
  MT_ASSERT(false, "bad RecomputeGranularity");
}

std::string recompute_label(const Layout& l) {
  if (l.recompute == RecomputeGranularity::kSelective &&
      l.recompute_modules.bits != RecomputeModules{}.bits)
    return fmt::format("selective({})", l.recompute_modules.describe());
  return std::string(recompute_name(l.recompute));
}

std::vector<std::string_view> recompute_module_list(const RecomputeModules& r) {
  std::vector<std::string_view> out;
  for (const auto& [name, m] : recompute_module_names())
    if (r.has(m)) out.push_back(name);
  return out;
}

std::string layout_name(const Layout& l) {
  const ParallelConfig& p = l.parallel;
  std::string s = fmt::format("TP{} PP{}", p.tp(), p.pp());
  if (p.vpp() > 1) s += fmt::format(" VPP{}", p.vpp());
  s += fmt::format(" CP{}", p.cp());
  const std::string cp_comm = p.cp_comm_summary(true);
  if (!cp_comm.empty()) s += fmt::format("({})", cp_comm);
  if (p.ep() > 1 || p.etp() != p.tp()) s += fmt::format(" EP{} ETP{}", p.ep(), p.etp());
  s += fmt::format(" DP{} mbs{}", p.dp(), p.micro_batch_size);
  if (l.recompute != RecomputeGranularity::kNone) s += " recompute-" + recompute_label(l);
  return s;
}

}  // namespace mtron::plan
