#include "mtron/train/weight_hash.h"

#include <cstdint>

#include "mtron/kernels/device.h"

namespace mtron::train {

namespace {

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

}  // namespace

std::vector<std::string> replica_mismatches(const kernels::Ctx& k,
                                            const model::ParamBuffer& params,
                                            Comm& group,
                                            bool replicated) {
  std::vector<int> handles;
  std::vector<int64_t> mine;
  std::vector<uint8_t> bytes;
  for (size_t h = 0; h < params.specs().size(); ++h) {
    const model::ParamSpec& s = params.specs()[h];
    if (replicated && !s.tp_replicated()) continue;
    const kernels::GemmOperand w = params.weight(int(h));
    bytes.resize(size_t(s.numel()) * dtype_size(w.dtype));
    kernels::copy_to_host(k, bytes.data(), w.data, int64_t(bytes.size()));
    handles.push_back(int(h));
    mine.push_back(int64_t(fnv1a(bytes)));
  }
  std::vector<std::string> bad;
  if (handles.empty() || group.size() == 1) return bad;
  const size_t n = mine.size();
  std::vector<int64_t> all(n * size_t(group.size()));
  group.all_gather(mine.data(), all.data(), int64_t(n), DType::kI64);
  for (size_t i = 0; i < n; ++i)
    for (int r = 1; r < group.size(); ++r)
      if (all[size_t(r) * n + i] != all[i]) {
        bad.push_back(params.spec(handles[i]).name);
        break;
      }
  return bad;
}

}  // namespace mtron::train
