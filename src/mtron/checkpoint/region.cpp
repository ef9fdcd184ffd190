#include "mtron/checkpoint/region.h"

#include <algorithm>

#include "mtron/core/error.h"

namespace mtron::checkpoint {

Region Region::whole(const Shape& global) {
  return Region{global, Shape(global.size(), 0), global, 0, numel(global)};
}

void region_runs(const Region& src,
                 const Region& dst,
                 const std::function<void(int64_t, int64_t, int64_t)>& f) {
  const size_t nd = src.block.size();
  MT_ASSERT(dst.block.size() == nd, "regions of different rank");
  if (src.size() <= 0 || dst.size() <= 0) return;
  if (nd == 0) {  // scalars: one element each
    f(0, 0, 1);
    return;
  }
  Shape lo(nd), hi(nd);
  for (size_t d = 0; d < nd; ++d) {
    lo[d] = std::max(src.offset[d], dst.offset[d]);
    hi[d] = std::min(src.offset[d] + src.block[d], dst.offset[d] + dst.block[d]);
    if (lo[d] >= hi[d]) return;
  }
  Shape ss(nd, 1), ds(nd, 1);  // row-major strides of the two blocks
  for (size_t d = nd - 1; d > 0; --d) {
    ss[d - 1] = ss[d] * src.block[d];
    ds[d - 1] = ds[d] * dst.block[d];
  }
  const int64_t L = hi[nd - 1] - lo[nd - 1];
  Shape idx(lo.begin(), lo.end());
  int64_t ps = -1, pd = -1, pn = 0;  // the pending (merged) run
  for (;;) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < nd; ++d) {
      s += (idx[d] - src.offset[d]) * ss[d];
      t += (idx[d] - dst.offset[d]) * ds[d];
    }
    // Rows come in increasing flat order in both blocks: past either range, nothing follows.
    if (s >= src.flat_end || t >= dst.flat_end) break;
    const int64_t k0 = std::max({int64_t(0), src.flat_begin - s, dst.flat_begin - t});
    const int64_t k1 = std::min({L, src.flat_end - s, dst.flat_end - t});
    if (k0 < k1) {
      const int64_t a = s + k0 - src.flat_begin, b = t + k0 - dst.flat_begin;
      if (pn > 0 && ps + pn == a && pd + pn == b) {
        pn += k1 - k0;
      } else {
        if (pn > 0) f(ps, pd, pn);
        ps = a;
        pd = b;
        pn = k1 - k0;
      }
    }
    // Next row: odometer over dims 0..nd-2 within [lo, hi).
    int d = int(nd) - 2;
    while (d >= 0) {
      if (++idx[size_t(d)] < hi[size_t(d)]) break;
      idx[size_t(d)] = lo[size_t(d)];
      --d;
    }
    if (d < 0) break;
  }
  if (pn > 0) f(ps, pd, pn);
}

void validate_region(const Region& r, const std::string& where) {
  MT_CHECK(r.offset.size() == r.global.size() && r.block.size() == r.global.size(), where,
           ": offset ", shape_str(r.offset), " and block ", shape_str(r.block),
           " do not match the rank of global shape ", shape_str(r.global));
  int64_t n = 1;
  for (int64_t d : r.global) {
    MT_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n) && n <= (int64_t(1) << 48), where,
             ": global shape ", shape_str(r.global), " is too large");
  }
  for (size_t d = 0; d < r.global.size(); ++d) {
    MT_CHECK(r.global[d] >= 0 && r.offset[d] >= 0 && r.block[d] >= 0 &&
                 r.offset[d] <= r.global[d] && r.block[d] <= r.global[d] - r.offset[d],
             where, ": block ", shape_str(r.block), " at ", shape_str(r.offset),
             " lies outside global shape ", shape_str(r.global));
  }
  MT_CHECK(r.flat_begin >= 0 && r.flat_begin <= r.flat_end && r.flat_end <= numel(r.block), where,
           ": element range [", r.flat_begin, ", ", r.flat_end, ") outside block ",
           shape_str(r.block));
}

bool regions_tile(const std::vector<const Region*>& pieces) {
  if (pieces.empty()) return false;
  const Shape& g = pieces.front()->global;
  int64_t total = 0;
  for (const Region* p : pieces) {
    if (p->global != g) return false;
    total += p->size();
  }
  if (total != numel(g)) return false;
  // Sizes add up; pairwise disjoint then means every element is covered exactly once.
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (size_t j = i + 1; j < pieces.size(); ++j) {
      bool overlap = false;
      region_runs(*pieces[i], *pieces[j], [&](int64_t, int64_t, int64_t) { overlap = true; });
      if (overlap) return false;
    }
  }
  return true;
}

}  // namespace mtron::checkpoint
