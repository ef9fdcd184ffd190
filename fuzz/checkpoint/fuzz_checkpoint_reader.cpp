// Fuzzes the checkpoint reader on an untrusted shard: the input is one rank's safetensors file;
// the harness writes it with a valid manifest.json naming it (size and header checksum fixed up,
// so the fuzzer reaches the piece descriptions), opens the directory with CheckpointReader and
// reads every tensor whole, and every 2-D tensor's halves as two TP ranks would (the resharding
// path), and the first half of each flattened tensor (a distributed-optimizer shard).
#include <cstdint>
#include <string>
#include <vector>

#include "../data/fuzz_util.h"
#include "mtron/checkpoint/crc32c.h"
#include "mtron/checkpoint/reader.h"
#include "mtron/core/error.h"

using namespace mtron;
using namespace mtron::checkpoint;

namespace {

uint32_t header_crc(std::string_view f) {
  if (f.size() < 8) return 0;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(f[size_t(i)]);
  if (n > f.size() - 8) return 0;
  return crc32c(f.data() + 8, size_t(n));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static data::fuzz::FuzzFiles files;
  const std::string_view shard(reinterpret_cast<const char*>(data), size);
  files.write("rank_00000.safetensors", shard);
  files.write("manifest.json",
              R"({"format": "mtron-checkpoint", "format_version": 1, "iteration": 1,
                  "consumed_samples": 4, "model": {"num_layers": 1, "hidden_size": 8,
                  "num_attention_heads": 2, "group_query_attention": false,
                  "num_query_groups": 1, "kv_channels": 4, "ffn_hidden_size": 32,
                  "swiglu": false, "normalization": "LayerNorm", "norm_epsilon": 1e-05,
                  "position_embedding_type": "learned_absolute", "rotary_base": 10000.0,
                  "rotary_percent": 1.0, "untie_embeddings_and_output_weights": false,
                  "add_bias_linear": true, "make_vocab_size_divisible_by": 8,
                  "seq_length": 4, "max_position_embeddings": 4, "vocab_size": 8},
                  "optimizer": null, "files": [{"name": "rank_00000.safetensors", "bytes": )" +
                  std::to_string(size) + R"(, "header_crc32c": )" +
                  std::to_string(header_crc(shard)) + "}]}");
  try {
    const CheckpointReader r(files.path(""));
    std::vector<float> buf;
    for (const std::string& key : r.keys()) {
      const Shape& g = r.global_shape(key);
      (void)r.read_global(key);
      if (g.size() == 2 && g[0] >= 2) {
        for (int64_t half = 0; half < 2; ++half) {
          const int64_t rows = g[0] / 2;
          Region t{g, {half * rows, 0}, {rows, g[1]}, 0, rows * g[1]};
          buf.resize(size_t(t.size()));
          r.read(key, t, buf.data());
        }
      }
      Region f = Region::whole(g);
      f.flat_end = f.flat_end / 2;
      buf.resize(size_t(f.size()));
      r.read(key, f, buf.data());
    }
  } catch (const Error&) {
  }
  return 0;
}
