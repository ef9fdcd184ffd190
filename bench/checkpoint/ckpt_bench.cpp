// Checkpoint save and load throughput for a whole model in one process (bench/README.md).
//
//   ckpt_bench DIR [124m|1b] [--no-optimizer] [--repeats N]
//
// Builds the model (GPT-2 124M: 12 x 768, or a ~1B GPT: 18 x 2048, vocabulary 50257), saves a
// checkpoint (fp32 master weights + Adam's two moments: 12 bytes per parameter) into DIR with
// the real protocol (write, fsync, commit), and loads it back; then drops DIR's pages from the
// page cache (posix_fadvise DONTNEED on the fsynced, hence clean, files) and loads again from
// the disk. To keep memory in check the two moments alias the gradient buffer: the bytes moved
// are a real optimizer checkpoint's, the resident memory is 8 bytes per parameter.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/comm/single.h"
#include "mtron/core/log.h"
#include "mtron/core/timer.h"
#include "mtron/model/gpt.h"

using namespace mtron;
namespace fs = std::filesystem;

namespace {

ModelConfig bench_model(const std::string& name) {
  ModelConfig m;
  const bool big = name == "1b";
  m.num_layers = big ? 18 : 12;
  m.hidden_size = big ? 2048 : 768;
  m.num_attention_heads = big ? 16 : 12;
  m.seq_length = big ? 2048 : 1024;
  m.vocab_size = 50257;
  m.finalize();
  return m;
}

uint64_t dir_bytes(const fs::path& d) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(d)) n += e.is_regular_file() ? e.file_size() : 0;
  return n;
}

void drop_page_cache(const fs::path& d) {
  for (const auto& e : fs::directory_iterator(d)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  log_init(0, 1, LogLevel::kWarn);
  if (argc < 2) {
    std::fprintf(stderr, "usage: ckpt_bench DIR [124m|1b] [--no-optimizer] [--repeats N]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::string name = "124m";
  bool optimizer = true;
  int repeats = 3;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-optimizer") {
      optimizer = false;
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else {
      name = a;
    }
  }
  const ModelConfig cfg = bench_model(name);
  model::GPTChunk chunk(cfg, {0, cfg.num_layers, true, true}, parallel::TensorParallel{}, {});
  model::ParamBuffer& p = chunk.params();
  p.allocate(Precision::kFP32, 1);
  p.init(1234);
  float* moments = p.grad_flat().f32();
  std::memcpy(moments, p.master_flat().f32(), sizeof(float) * size_t(p.size()));
  std::vector<checkpoint::ChunkState> st(1);
  st[0].params = &p;
  if (optimizer) st[0].exp_avg = st[0].exp_avg_sq = {nullptr, moments, 0};
  st[0].opt_shards = {{0, p.size()}};
  auto world = make_single_comm();
  const checkpoint::RankGroups g{world.get(), world.get(), 0};
  checkpoint::RunInfo info;
  info.model = cfg;

  std::printf("model %s: %.1f M parameters (%s), checkpoint of %s\n", name.c_str(),
              double(cfg.num_parameters(1)) / 1e6, cfg.summary().c_str(),
              optimizer ? "weights + Adam moments (12 B/parameter)" : "weights (4 B/parameter)");
  std::vector<double> save, warm, cold;
  uint64_t bytes = 0;
  for (int r = 0; r < repeats; ++r) {
    fs::remove_all(dir);
    double t0 = now_seconds();
    checkpoint::Progress progress;
    progress.iteration = r + 1;
    const std::string d = checkpoint::save_checkpoint(dir, st, info, progress, g, {});
    save.push_back(now_seconds() - t0);
    bytes = dir_bytes(d);
    t0 = now_seconds();
    checkpoint::load_checkpoint(d, st, g, optimizer);
    warm.push_back(now_seconds() - t0);
    drop_page_cache(d);
    t0 = now_seconds();
    checkpoint::load_checkpoint(d, st, g, optimizer);
    cold.push_back(now_seconds() - t0);
    std::printf("  run %d: save %.2f s, load (page cache) %.2f s, load (after DONTNEED) %.2f s\n",
                r + 1, save.back(), warm.back(), cold.back());
  }
  auto best = [](std::vector<double> v) { return *std::min_element(v.begin(), v.end()); };
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double gb = double(bytes) / 1e9;
  std::printf(
      "%.2f GB: save %.2f GB/s (best %.2f), load %.2f GB/s from the page cache (best "
      "%.2f), %.2f GB/s after dropping it (best %.2f); medians of %d\n",
      gb, gb / med(save), gb / best(save), gb / med(warm), gb / best(warm), gb / med(cold),
      gb / best(cold), repeats);
  fs::remove_all(dir);
  return 0;
}
