#include "mtron/parallel/rank_map.h"

#include <fmt/core.h>

#include <algorithm>
#include <utility>

#include "mtron/core/error.h"

namespace mtron {
namespace {

// Megatron's RankGenerator: dimensions in order, leftmost fastest.
class Generator {
 public:
  Generator(const std::string& order, const std::vector<std::pair<std::string, int>>& sizes) {
    size_t start = 0;
    while (start <= order.size()) {
      const size_t end = std::min(order.find('-', start), order.size());
      names_.push_back(order.substr(start, end - start));
      start = end + 1;
    }
    for (const auto& name : names_) {
      auto it = std::find_if(sizes.begin(), sizes.end(), [&](auto& p) { return p.first == name; });
      MT_ASSERT(it != sizes.end(), "unknown dimension '", name, "' in order ", order);
      sizes_.push_back(it->second);
    }
    int stride = 1;
    for (int s : sizes_) {
      strides_.push_back(stride);
      stride *= s;
    }
    world_ = stride;
  }

  int world() const { return world_; }

  int coord(int rank, const char* name) const {
    const size_t k = pos(name);
    return rank / strides_[k] % sizes_[k];
  }

  // The groups varying the named dimensions (leftmost fastest) with all others fixed.
  std::vector<std::vector<int>> groups(std::initializer_list<const char*> dims) const {
    std::vector<bool> mask(names_.size(), false);
    for (const char* d : dims) mask[pos(d)] = true;
    std::vector<int> in_shape, in_stride, out_shape, out_stride;
    for (size_t k = 0; k < names_.size(); ++k) {
      (mask[k] ? in_shape : out_shape).push_back(sizes_[k]);
      (mask[k] ? in_stride : out_stride).push_back(strides_[k]);
    }
    int group_size = 1;
    for (int s : in_shape) group_size *= s;
    // Position i along a shape, decomposed leftmost fastest, dotted with the global strides.
    auto place = [](int i, const std::vector<int>& shape, const std::vector<int>& stride) {
      int r = 0;
      for (size_t k = 0; k < shape.size(); ++k) {
        r += (i % shape[k]) * stride[k];
        i /= shape[k];
      }
      return r;
    };
    std::vector<std::vector<int>> out(size_t(world_ / group_size));
    for (size_t g = 0; g < out.size(); ++g) {
      const int base = place(int(g), out_shape, out_stride);
      for (int i = 0; i < group_size; ++i) out[g].push_back(base + place(i, in_shape, in_stride));
    }
    return out;
  }

 private:
  size_t pos(const char* name) const {
    auto it = std::find(names_.begin(), names_.end(), name);
    MT_ASSERT(it != names_.end(), "dimension ", name, " not in the order");
    return size_t(it - names_.begin());
  }

  std::vector<std::string> names_;
  std::vector<int> sizes_;
  std::vector<int> strides_;
  int world_ = 1;
};

std::string join(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  s += ']';
  return s;
}

// "tp + 2*cp + 4*dp + 8*pp" over the dimensions of size > 1 ("0" when there are none).
std::string formula(const std::vector<std::pair<const char*, int>>& dims) {
  std::string s;
  int stride = 1;
  for (auto [name, size] : dims) {
    if (size > 1) {
      if (!s.empty()) s += " + ";
      s += stride == 1 ? std::string(name) : fmt::format("{}*{}", stride, name);
    }
    stride *= size;
  }
  return s.empty() ? "0" : s;
}

}  // namespace

std::string_view group_name(GroupKind k) {
  switch (k) {
    case GroupKind::kTP:
      return "tp";
    case GroupKind::kCP:
      return "cp";
    case GroupKind::kDP:
      return "dp";
    case GroupKind::kDPCP:
      return "dp-cp";
    case GroupKind::kPP:
      return "pp";
    case GroupKind::kTPPP:
      return "tp-pp";
    case GroupKind::kTPCP:
      return "tp-cp";
    case GroupKind::kTPDPCP:
      return "tp-dp-cp";
    case GroupKind::kEmbedding:
      return "embedding";
    case GroupKind::kEP:
      return "ep";
    case GroupKind::kETP:
      return "etp";
    case GroupKind::kTPEP:
      return "tp-ep";
    case GroupKind::kEDP:
      return "edp";
  }
  MT_ASSERT(false, "unknown group kind");
}

RankMap::RankMap(const ParallelConfig& cfg) : world_(int(cfg.world_size)), order_(cfg.order()) {
  MT_ASSERT(cfg.etp() >= 1, "ParallelConfig must be finalized before building the rank map");
  MT_ASSERT(cfg.world_size % (cfg.tp() * cfg.cp() * cfg.pp()) == 0 &&
                cfg.world_size % (cfg.etp() * cfg.ep() * cfg.pp()) == 0,
            "ParallelConfig sizes do not divide the world; finalize() checks this");
  const Generator dec(order_, {{"tp", int(cfg.tp())},
                               {"cp", int(cfg.cp())},
                               {"ep", 1},
                               {"dp", int(cfg.dp())},
                               {"pp", int(cfg.pp())}});
  const Generator exp(order_, {{"tp", int(cfg.etp())},
                               {"cp", 1},
                               {"ep", int(cfg.ep())},
                               {"dp", int(cfg.edp())},
                               {"pp", int(cfg.pp())}});
  MT_ASSERT(dec.world() == world_ && exp.world() == world_, "generator world size mismatch");
  // Megatron's initialize_model_parallel checks, with its messages.
  MT_CHECK(order_.ends_with("pp") || cfg.pp() == 1 || cfg.edp() == cfg.dp(),
           "When not using pp-last rank ordering, the data parallel size of the attention and moe "
           "layers must be the same (--use-tp-pp-dp-mapping with data parallel size ",
           cfg.dp(), " and expert data parallel size ", cfg.edp(), ")");

  auto set = [&](GroupKind k, std::vector<std::vector<int>> g) { groups_[idx(k)] = std::move(g); };
  set(GroupKind::kTP, dec.groups({"tp"}));
  set(GroupKind::kCP, dec.groups({"cp"}));
  set(GroupKind::kDP, dec.groups({"dp"}));
  set(GroupKind::kDPCP, dec.groups({"dp", "cp"}));
  set(GroupKind::kPP, dec.groups({"pp"}));
  set(GroupKind::kTPPP, dec.groups({"tp", "pp"}));
  set(GroupKind::kTPCP, dec.groups({"tp", "cp"}));
  set(GroupKind::kTPDPCP, dec.groups({"tp", "dp", "cp"}));
  set(GroupKind::kEP, exp.groups({"ep"}));
  set(GroupKind::kETP, exp.groups({"tp"}));
  set(GroupKind::kTPEP, exp.groups({"tp", "ep"}));
  set(GroupKind::kEDP, exp.groups({"dp"}));
  MT_CHECK(groups(GroupKind::kPP) == exp.groups({"pp"}),
           "Pipeline parallel groups are expected to be the same for Non-Expert and Expert part");
  std::vector<std::vector<int>> emb;
  for (const auto& pp : groups(GroupKind::kPP))
    emb.push_back(pp.size() == 1 ? std::vector<int>{pp.front()}
                                 : std::vector<int>{pp.front(), pp.back()});
  set(GroupKind::kEmbedding, std::move(emb));

  for (size_t k = 0; k < size_t(kGroupKinds); ++k) {
    member_of_[k].assign(size_t(world_), -1);
    for (size_t g = 0; g < groups_[k].size(); ++g)
      for (int r : groups_[k][g]) {
        MT_ASSERT(member_of_[k][size_t(r)] == -1, "rank ", r, " in two groups of one kind");
        member_of_[k][size_t(r)] = int(g);
      }
  }
  coords_.resize(size_t(world_));
  for (int r = 0; r < world_; ++r) {
    RankCoords& c = coords_[size_t(r)];
    c.tp = dec.coord(r, "tp");
    c.cp = dec.coord(r, "cp");
    c.dp = dec.coord(r, "dp");
    c.pp = dec.coord(r, "pp");
    c.etp = exp.coord(r, "tp");
    c.ep = exp.coord(r, "ep");
    c.edp = exp.coord(r, "dp");
  }
}

const std::vector<int>* RankMap::group_of(GroupKind k, int rank) const {
  const int g = group_index(k, rank);
  return g < 0 ? nullptr : &groups(k)[size_t(g)];
}

int RankMap::group_rank(GroupKind k, int rank) const {
  const std::vector<int>* g = group_of(k, rank);
  if (!g) return -1;
  return int(std::find(g->begin(), g->end(), rank) - g->begin());
}

std::string format_layout(const ParallelConfig& cfg, int max_items) {
  const RankMap map(cfg);
  const bool experts = cfg.ep() > 1 || cfg.etp() != cfg.tp();
  const bool pp_last = !cfg.use_tp_pp_dp_mapping;
  std::string out = fmt::format("world {} = TP {} x CP {} x DP {} x PP {}", cfg.world_size,
                                cfg.tp(), cfg.cp(), cfg.dp(), cfg.pp());
  if (experts)
    out += fmt::format("; experts ETP {} x EP {} x EDP {} x PP {}", cfg.etp(), cfg.ep(), cfg.edp(),
                       cfg.pp());
  out += fmt::format("\norder {} (leftmost fastest)\n", map.order());
  auto dims = [&](std::pair<const char*, int> tp, std::pair<const char*, int> cp,
                  std::pair<const char*, int> ep, std::pair<const char*, int> dp,
                  std::pair<const char*, int> pp) {
    return pp_last ? formula({tp, cp, ep, dp, pp}) : formula({tp, cp, ep, pp, dp});
  };
  out += "rank = " + dims({"tp", int(cfg.tp())}, {"cp", int(cfg.cp())}, {"ep", 1},
                          {"dp", int(cfg.dp())}, {"pp", int(cfg.pp())});
  if (experts)
    out += "  (experts: rank = " +
           dims({"etp", int(cfg.etp())}, {"cp", 1}, {"ep", int(cfg.ep())}, {"edp", int(cfg.edp())},
                {"pp", int(cfg.pp())}) +
           ")";
  out += "\n\n";

  out += " rank   tp   cp   dp   pp";
  if (experts) out += "  etp   ep  edp";
  out += "  stage\n";
  const int rows = std::min(map.world_size(), max_items);
  for (int r = 0; r < rows; ++r) {
    const RankCoords& c = map.coords(r);
    out += fmt::format("{:5d} {:4d} {:4d} {:4d} {:4d}", r, c.tp, c.cp, c.dp, c.pp);
    if (experts) out += fmt::format(" {:4d} {:4d} {:4d}", c.etp, c.ep, c.edp);
    const bool first = c.pp == 0, last = c.pp == cfg.pp() - 1;
    out += first && last ? "  first+last" : first ? "  first" : last ? "  last" : "";
    out += "\n";
  }
  if (rows < map.world_size()) out += fmt::format("  ... {} more ranks\n", map.world_size() - rows);

  out += "\ngroup       size  count  members\n";
  for (int k = 0; k < kGroupKinds; ++k) {
    const GroupKind kind = GroupKind(k);
    const bool expert_kind = kind >= GroupKind::kEP;
    if (expert_kind && !experts) continue;
    const auto& gs = map.groups(kind);
    out += fmt::format("{:<10} {:5d} {:6d} ", group_name(kind), gs.front().size(), gs.size());
    const size_t shown = std::min(gs.size(), size_t(max_items));
    for (size_t g = 0; g < shown; ++g) {
      out += ' ';
      out += join(gs[g]);
    }
    if (shown < gs.size()) out += fmt::format(" ... {} more", gs.size() - shown);
    out += "\n";
  }
  return out;
}

}  // namespace mtron
