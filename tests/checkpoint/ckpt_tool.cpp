// Test helper over the checkpoint reader (not a user command):
//   ckpt_tool compare A B [--model-only]   every tensor of A and B bit-identical (same keys);
//                                          vocabulary tensors compared over the real rows
//   ckpt_tool dump DIR KEY OUT.bin          one global tensor as raw little-endian fp32
//   ckpt_tool logits DIR OUT.bin ID...      the model's logits [n, vocab] for the ids (one
//                                           prefill through the KV-cache inference forward)
// Exit 0 when equal, 1 when not, 2 on a (reported) error.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/checkpoint/reader.h"
#include "mtron/checkpoint/whole_model.h"
#include "mtron/model/inference.h"

using namespace mtron;
using namespace mtron::checkpoint;

namespace {

int compare(const std::string& a_dir, const std::string& b_dir, bool model_only) {
  CheckpointReader a(find_checkpoint(a_dir).value()), b(find_checkpoint(b_dir).value());
  const int64_t vocab = a.manifest().model.vocab_size;
  int bad = 0, n = 0;
  for (const std::string& key : a.keys()) {
    const bool optimizer = key.rfind("optimizer.", 0) == 0;
    if (model_only && optimizer) continue;
    if (!b.has(key)) {
      std::printf("missing in B: %s\n", key.c_str());
      ++bad;
      continue;
    }
    Tensor x = a.read_global(key), y = b.read_global(key);
    int64_t rows = x.ndim() > 0 ? x.dim(0) : 1;
    const std::string base = optimizer ? key.substr(key.find('.', 10) + 1) : key;
    if (is_vocab_parameter(base)) {
      rows = vocab;  // padding rows may differ (TP-dependent padding, zero-padded imports)
    } else if (x.shape() != y.shape()) {
      std::printf("shape differs: %s %s vs %s\n", key.c_str(), shape_str(x.shape()).c_str(),
                  shape_str(y.shape()).c_str());
      ++bad;
      continue;
    }
    const int64_t len = x.ndim() > 0 ? rows * (x.numel() / x.dim(0)) : 1;
    double worst = 0;
    int64_t diff = 0;
    for (int64_t i = 0; i < len; ++i) {
      if (std::memcmp(x.f32() + i, y.f32() + i, 4) != 0) {
        ++diff;
        worst = std::max(worst, std::fabs(double(x.f32()[i]) - double(y.f32()[i])));
      }
    }
    ++n;
    if (diff) {
      std::printf("differs: %s (%lld elements, max |diff| %.3g)\n", key.c_str(), (long long)diff,
                  worst);
      ++bad;
    }
  }
  for (const std::string& key : b.keys()) {
    if (!(model_only && key.rfind("optimizer.", 0) == 0) && !a.has(key)) {
      std::printf("missing in A: %s\n", key.c_str());
      ++bad;
    }
  }
  std::printf("%d tensors compared, %d differ\n", n, bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "compare" && argc >= 4) {
      return compare(argv[2], argv[3], argc > 4 && std::string(argv[4]) == "--model-only");
    }
    if (cmd == "dump" && argc == 5) {
      CheckpointReader r(find_checkpoint(argv[2]).value());
      Tensor t = r.read_global(argv[3]);
      FILE* f = std::fopen(argv[4], "wb");
      if (!f || std::fwrite(t.f32(), 4, size_t(t.numel()), f) != size_t(t.numel())) return 2;
      std::fclose(f);
      return 0;
    }
    if (cmd == "logits" && argc >= 5) {
      auto m = load_whole_model(argv[2]);
      std::vector<int32_t> ids;
      for (int i = 4; i < argc; ++i) ids.push_back(int32_t(std::stoi(argv[i])));
      const int64_t n = int64_t(ids.size()), V = m->cfg.vocab_size;
      model::InferenceModel im(m->cfg, *m->chunk, n);
      std::vector<float> lg(static_cast<size_t>(n * im.padded_vocab()));
      im.forward(ids.data(), n, lg.data(), true);
      FILE* f = std::fopen(argv[3], "wb");
      for (int64_t r = 0; f && r < n; ++r)
        std::fwrite(lg.data() + r * im.padded_vocab(), 4, size_t(V), f);
      if (!f || std::fclose(f) != 0) return 2;
      return 0;
    }
    std::fprintf(
        stderr,
        "usage: ckpt_tool compare A B [--model-only] | dump DIR KEY OUT | logits DIR OUT ID...\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_tool: %s\n", e.what());
    return 2;
  }
}
