#include "mtron/core/philox.h"

#include <cmath>

#include "mtron/core/error.h"

namespace mtron {

PhiloxKey rng_key(uint64_t seed, std::string_view name) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char ch : name) h = (h ^ uint8_t(ch)) * 0x100000001b3ull;
  z ^= h;
  return {uint32_t(z), uint32_t(z >> 32)};
}

namespace {
// (0, 1]: never 0, so log() below is finite.
inline double unit_open0(uint32_t a, uint32_t b) {
  uint64_t bits = (uint64_t(a) << 21) ^ uint64_t(b);  // 53 bits
  bits &= (uint64_t(1) << 53) - 1;
  return (double(bits) + 1.0) * (1.0 / 9007199254740992.0);
}
}  // namespace

float normal_at(PhiloxKey key, uint64_t index) {
  auto r = philox_block(key, index >> 1);
  double u1 = unit_open0(r[0], r[1]);
  double u2 = unit_open0(r[2], r[3]);
  double rad = std::sqrt(-2.0 * std::log(u1));
  double ang = 6.283185307179586 * u2;
  return float((index & 1) ? rad * std::sin(ang) : rad * std::cos(ang));
}

float uniform_at(PhiloxKey key, uint64_t index) {
  auto r = philox_block(key, index);
  return float(r[0] >> 8) * (1.0f / 16777216.0f);
}

uint64_t u64_at(PhiloxKey key, uint64_t index) {
  auto r = philox_block(key, index);
  return (uint64_t(r[1]) << 32) | r[0];
}

void fill_normal_shard(float* out,
                       PhiloxKey key,
                       float std,
                       const Shape& global,
                       int shard_dim,
                       int64_t offset,
                       int64_t extent) {
  if (shard_dim < 0) {
    shard_dim = 0;
    offset = 0;
    extent = global.empty() ? 1 : global[0];
  }
  MT_ASSERT(shard_dim < int(global.size()) && offset >= 0 && offset + extent <= global[shard_dim],
            "shard [", offset, ", +", extent, ") of dim ", shard_dim, " of ", shape_str(global));
  // global = [outer, dim, inner]; the shard keeps rows [offset, offset+extent) of `dim`.
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < shard_dim; ++i) outer *= global[i];
  for (size_t i = shard_dim + 1; i < global.size(); ++i) inner *= global[i];
  const int64_t dim = global[shard_dim];
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t r = 0; r < extent; ++r) {
      float* dst = out + (o * extent + r) * inner;
      uint64_t base = uint64_t((o * dim + offset + r) * inner);
      for (int64_t i = 0; i < inner; ++i) dst[i] = std * normal_at(key, base + i);
    }
  }
}

}  // namespace mtron
