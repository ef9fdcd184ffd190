#include "mtron/checkpoint/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>

#include "mtron/checkpoint/crc32c.h"
#include "mtron/checkpoint/file_io.h"
#include "mtron/checkpoint/reader.h"
#include "mtron/checkpoint/safetensors.h"
#include "mtron/core/log.h"
#include "mtron/core/timer.h"
#include "mtron/core/version.h"
#include "mtron/kernels/device.h"

// The weights and moments live on the parameter buffer's device (ParamBuffer::ctx()) and reach
// the host through kernels/device.h only: a save copies each piece in chunks of
// kernels::chunk_elems floats, a load one parameter's range at a time. So the files, and what
// loads, do not depend on the device.
namespace mtron::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = "latest_checkpointed_iteration.txt";
constexpr const char* kExpAvg = "optimizer.exp_avg.";
constexpr const char* kExpAvgSq = "optimizer.exp_avg_sq.";

std::string rank_file_name(int rank) {
  return fmt::format("rank_{:05d}.safetensors", rank);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t total(const std::vector<FlatRange>& rs) {
  int64_t n = 0;
  for (const FlatRange& r : rs) n += r.end - r.begin;
  return n;
}

// The ranges of a chunk's flat buffer this rank writes: its distributed-optimizer shards (with or
// without the optimizer state: under FSDP they are all of the master weights it holds), or
// (replicated optimizer state) its equal part of the buffer among the dp_cp replicas.
std::vector<FlatRange> write_ranges(const ChunkState& c, const Comm& dp_cp) {
  const int64_t size = c.params->size();
  if (total(c.opt_shards) < size) return c.opt_shards;
  const int64_t w = dp_cp.size(), part = (size + w - 1) / w;
  const int64_t b = std::min(size, dp_cp.rank() * part);
  return {{b, std::min(size, b + part)}};
}

// Where flat element `i` of the buffer sits in the concatenated moments of `shards`.
int64_t moment_index(const std::vector<FlatRange>& shards, int64_t i) {
  const int64_t m = optim::shard_moment(shards, i);
  MT_ASSERT(m >= 0, "element ", i, " outside the optimizer shards");
  return m;
}

// The region of parameter spec `s` that flat elements [lo, hi) of its buffer hold.
Region param_region(const model::ParamSpec& s, int64_t lo, int64_t hi) {
  Region r;
  r.global = s.global_shape;
  r.offset.assign(s.global_shape.size(), 0);
  if (s.shard_dim >= 0) r.offset[size_t(s.shard_dim)] = s.shard_offset;
  r.block = s.local_shape;
  r.flat_begin = lo - s.offset;
  r.flat_end = hi - s.offset;
  return r;
}

// Calls f(spec, lo, hi) for every parameter overlapping flat range [b, e) of the buffer.
template <typename F>
void for_each_param_in(const model::ParamBuffer& p, int64_t b, int64_t e, F f) {
  for (const model::ParamSpec& s : p.specs()) {
    const int64_t lo = std::max(b, s.offset), hi = std::min(e, s.offset + s.numel());
    if (lo < hi) f(s, lo, hi);
  }
}

// How a save reaches the buffers of a chunk on its device: host copies of
// kernels::chunk_elems floats.
DataSource device_source(const kernels::Ctx& k) {
  return {[k](void* dst, const void* src, uint64_t n) {
            kernels::copy_to_host(k, dst, src, int64_t(n));
          },
          uint64_t(kernels::chunk_elems(k.device)) * sizeof(float)};
}

void check_ec(const std::error_code& ec, const std::string& what) {
  MT_CHECK(!ec, what, ": ", ec.message());
}

// Leftovers of interrupted saves and deletions.
void remove_stale(const fs::path& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp.iter_", 0) == 0 || n.rfind(".trash.", 0) == 0) fs::remove_all(e.path(), ec);
  }
}

// Committed iterations in root (directories iter_NNNNNNN with a manifest), ascending.
std::vector<int64_t> committed_iterations(const fs::path& root) {
  std::vector<int64_t> its;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() < 6 || n.rfind("iter_", 0) != 0) continue;
    if (!std::all_of(n.begin() + 5, n.end(), [](char c) { return std::isdigit(c); })) continue;
    if (fs::exists(e.path() / "manifest.json")) its.push_back(std::stoll(n.substr(5)));
  }
  std::sort(its.begin(), its.end());
  return its;
}

// The run's tokenizer files, copied into the checkpoint's tokenizer/ folder (durably), so a
// moved checkpoint still generates and exports: the record names them relative to `dir`. A
// Hugging Face tokenizer brings its tokenizer_config.json and special_tokens_map.json.
TokenizerRecord carry_tokenizer(const TokenizerRecord& t, const fs::path& dir) {
  TokenizerRecord r = t;
  const fs::path into = dir / "tokenizer";
  auto copy = [&](const fs::path& from, const fs::path& to) {
    std::error_code ec;
    fs::create_directories(into, ec);
    check_ec(ec, "cannot create " + into.string());
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    check_ec(ec, "cannot copy the tokenizer file " + from.string() + " into the checkpoint");
    fsync_path(to.string());
  };
  for (std::string* f : {&r.vocab_file, &r.merge_file, &r.model}) {
    if (f->empty()) continue;
    const fs::path src(*f);
    const bool folder = fs::is_directory(src);
    MT_CHECK(folder || fs::is_regular_file(src), "tokenizer file ", *f,
             " is missing: it cannot be saved with the checkpoint");
    if (!folder) copy(src, into / src.filename());
    if (t.type == "HuggingFaceTokenizer") {
      const fs::path from = folder ? src : src.parent_path();
      for (const char* n : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
        if (fs::is_regular_file(from / n) && (folder || src.filename() != n))
          copy(from / n, into / n);
      }
    }
    *f = folder ? "tokenizer" : (fs::path("tokenizer") / src.filename()).string();
  }
  if (fs::exists(into)) fsync_path(into.string());
  return r;
}

// The marker's text, trimmed ("" without a marker).
std::string marker_text(const fs::path& root) {
  const fs::path marker = root / kMarker;
  if (!fs::exists(marker)) return "";
  std::string text = read_small_file(marker.string(), 64);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}
bool is_iteration_number(const std::string& text) {
  return !text.empty() && text.size() <= 12 &&
         std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(c); });
}
// The iteration the marker names (none: no marker, "release" or not a number).
std::optional<int64_t> marked_iteration(const fs::path& root) {
  const std::string text = marker_text(root);
  if (!is_iteration_number(text)) return std::nullopt;
  return std::stoll(text);
}

// Rank 0's part of the commit, once every rank's file is durable in `tmp`.
void commit(const fs::path& root, const fs::path& tmp, const Manifest& m, const Retention& keep) {
  const fs::path final = root / iteration_dir_name(m.iteration);
  const std::optional<int64_t> previous = marked_iteration(root);
  write_file_atomic((tmp / "manifest.json").string(), manifest_to_json(m));  // fsyncs tmp
  // A stale directory of the same iteration (a run that crashed before its marker update, or
  // an abandoned future after a rollback) is replaced.
  if (fs::exists(final)) remove_tree(final.string());
  std::error_code ec;
  fs::rename(tmp, final, ec);
  check_ec(ec, "cannot rename " + tmp.string() + " to " + final.string());
  fsync_path(root.string());
  write_file_atomic((root / kMarker).string(), std::to_string(m.iteration));
  if (keep.retain_interval > 0 && previous && *previous > 0 && *previous != m.iteration &&
      *previous % keep.retain_interval != 0) {
    const fs::path old = root / iteration_dir_name(*previous);
    if (fs::is_symlink(old)) {
      log_info("--save-retain-interval: {} is a symbolic link; not deleted", old.string());
    } else {
      remove_tree(old.string());
    }
  }
  const int64_t keep_last_n = keep.keep_last_n;
  if (keep_last_n > 0) {
    std::vector<int64_t> old;
    for (int64_t it : committed_iterations(root)) {
      if (it < m.iteration) old.push_back(it);
    }
    const int64_t keep_old = keep_last_n - 1;
    for (int64_t i = 0; i + keep_old < int64_t(old.size()); ++i) {
      remove_tree((root / iteration_dir_name(old[size_t(i)])).string());
    }
  }
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  return fmt::format("iter_{:07d}", iteration);
}

bool is_vocab_parameter(const std::string& name) {
  return name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
}

std::string save_checkpoint(const std::string& save_dir,
                            const std::vector<ChunkState>& chunks,
                            const RunInfo& info,
                            const Progress& progress,
                            const RankGroups& g,
                            const Retention& keep) {
  Comm& world = *g.world;
  const double t0 = now_seconds();
  const fs::path root(save_dir);
  const std::string name = iteration_dir_name(progress.iteration);
  const fs::path tmp = root / (".tmp." + name);
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    check_ec(ec, "cannot create --save directory " + save_dir);
    remove_stale(root);
    fs::create_directory(tmp, ec);
    check_ec(ec, "cannot create " + tmp.string());
    fsync_path(root.string());
  }
  world.barrier();

  // This rank's pieces: its share of each chunk's buffer, weights then moments. They live on the
  // chunk's device and reach the host in chunks (once for the checksums the header holds, once
  // for the file); the FP8 states are host memory.
  std::vector<SafetensorsTensor> tensors;
  std::vector<PieceInfo> pieces;
  std::vector<DataSource> sources;
  sources.reserve(chunks.size());  // the tensors point at them
  std::vector<uint8_t> buf;
  const bool with_optimizer = !chunks.empty() && bool(chunks.front().exp_avg);
  auto add = [&](const std::string& key, const Region& r, const float* data,
                 const DataSource* source) {
    tensors.push_back({key, "F32", r.whole_block() ? r.block : Shape{r.size()}, data, source});
    uint32_t crc = 0;
    for_each_host_chunk(source, data, uint64_t(r.size()) * sizeof(float), buf,
                        [&](const void* h, uint64_t n) { crc = crc32c(h, size_t(n), crc); });
    pieces.push_back({key, r, crc});
  };
  for (const ChunkState& c : chunks) {
    const model::ParamBuffer& p = *c.params;
    const DataSource* dev = &sources.emplace_back(device_source(p.ctx()));
    // A moment run [m, m + n) in host memory (offloaded, source null) or on the device.
    auto add_moments = [&](const std::string& key, const Region& r, const optim::MomentSplit& s,
                           int64_t m) {
      MT_ASSERT(s.on_host(m) == s.on_host(m + r.size() - 1), "moments of ", key,
                " straddle the offload boundary");
      add(key, r, s.at(m), s.on_host(m) ? nullptr : dev);
    };
    MT_ASSERT(!c.experts || g.edp, "expert buffer without an EDP group");
    const int tp_rank = c.experts ? g.etp_rank : g.tp_rank;
    for (const FlatRange& w : write_ranges(c, c.experts ? *g.edp : *g.dp_cp)) {
      for_each_param_in(p, w.begin, w.end, [&](const model::ParamSpec& s, int64_t lo, int64_t hi) {
        if (s.tied_copy || (s.tp_replicated() && tp_rank != 0)) return;
        const Region r = param_region(s, lo, hi);
        add(s.name, r, p.master_flat().f32() + lo, dev);
        if (with_optimizer) {
          // A write range lies inside one optimizer shard: its moments are contiguous.
          const int64_t m = moment_index(c.opt_shards, lo);
          MT_ASSERT(moment_index(c.opt_shards, hi - 1) == m + (hi - 1 - lo),
                    "write range crosses optimizer shards");
          add_moments(kExpAvg + s.name, r, c.exp_avg, m);
          add_moments(kExpAvgSq + s.name, r, c.exp_avg_sq, m);
        }
      });
    }
    if ((c.experts ? g.edp : g.dp_cp)->rank() == 0 && tp_rank == 0) {
      for (const StateTensor& t : c.states) add(t.name, Region::whole(t.shape), t.data, nullptr);
    }
  }
  int64_t rec[4] = {0, 0, 0, 0};  // has a file, bytes, header CRC, tensors
  if (!tensors.empty()) {
    const auto w = write_safetensors(
        (tmp / rank_file_name(world.rank())).string(), tensors,
        {{"format", "pt"}, {kPiecesMetadataKey, piece_metadata_json(pieces)}}, /*sync=*/true);
    rec[0] = 1;
    rec[1] = int64_t(w.bytes);
    rec[2] = int64_t(crc32c(w.header.data(), w.header.size()));
    rec[3] = int64_t(tensors.size());
  }
  std::vector<int64_t> all(static_cast<size_t>(4 * world.size()));
  world.all_gather(rec, all.data(), 4, DType::kI64);

  if (world.rank() == 0) {
    Manifest m;
    m.mtron_version = mtron_version();
    m.iteration = progress.iteration;
    m.consumed_samples = progress.consumed_samples;
    m.model = info.model;
    m.layout = info.layout;
    m.precision = info.precision;
    m.has_optimizer = with_optimizer;
    m.optimizer_steps = progress.optimizer_steps;
    m.lr_samples = progress.lr_samples;
    if (with_optimizer) m.grad_scaler = progress.grad_scaler;
    m.adam = info.adam;
    m.muon = info.muon;
    m.lr_schedule = info.lr_schedule;
    m.seed = info.seed;
    m.tokenizer = carry_tokenizer(info.tokenizer, tmp);
    m.saved_at = utc_now();
    uint64_t total = 0;
    for (int r = 0; r < world.size(); ++r) {
      const int64_t* x = &all[size_t(4 * r)];
      if (!x[0]) continue;
      m.files.push_back({rank_file_name(r), uint64_t(x[1]), uint32_t(x[2]), x[3]});
      total += uint64_t(x[1]);
    }
    commit(root, tmp, m, keep);
    const double dt = now_seconds() - t0;
    log_info("saved checkpoint at iteration {} to {}: {:.1f} MB in {:.2f} s ({:.2f} GB/s)",
             progress.iteration, (root / name).string(), double(total) / 1e6, dt,
             double(total) / 1e9 / std::max(dt, 1e-9));
  }
  world.barrier();
  return (root / name).string();
}

Manifest load_checkpoint(const std::string& dir,
                         const std::vector<ChunkState>& chunks,
                         const RankGroups& g,
                         bool load_optimizer) {
  const double t0 = now_seconds();
  CheckpointReader reader(dir);
  const Manifest& m = reader.manifest();
  MT_CHECK(!load_optimizer || m.has_optimizer, dir, " holds no optimizer state");
  int64_t bytes = 0;
  // Each parameter's range is read into host memory, then copied to the chunk's device.
  std::vector<float> staging;
  for (const ChunkState& c : chunks) {
    model::ParamBuffer& p = *c.params;
    const kernels::Ctx& device = p.ctx();
    const kernels::Ctx host{};
    // dst on `k`: the chunk's device, or the host for offloaded moments.
    auto read = [&](const std::string& key, const Region& r, float* dst, bool pad,
                    const kernels::Ctx& k) {
      const int64_t n = r.size();
      staging.resize(size_t(n));
      // Padding rows the checkpoint lacks keep their values.
      if (pad) kernels::copy_to_host(k, staging.data(), dst, n * 4);
      reader.read(key, r, staging.data(), pad);
      kernels::copy_from_host(k, dst, staging.data(), n * 4);
      bytes += n * 4;
    };
    float* master = p.master_flat().f32();
    const std::vector<FlatRange> held =
        c.params_sharded ? c.opt_shards : std::vector<FlatRange>{{0, p.size()}};
    for (const FlatRange& h : held) {
      p.commit_params(h.begin, h.end);
      for_each_param_in(p, h.begin, h.end, [&](const model::ParamSpec& s, int64_t lo, int64_t hi) {
        read(s.name, param_region(s, lo, hi), master + lo, is_vocab_parameter(s.name), device);
      });
      p.refresh_compute(h.begin, h.end);
    }
    for (const StateTensor& t : c.states) {
      if (reader.has(t.name)) reader.read(t.name, Region::whole(t.shape), t.data);
    }
    if (!load_optimizer) continue;
    MT_ASSERT(c.exp_avg && c.exp_avg_sq, "no optimizer state to load into");
    for (const FlatRange& sh : c.opt_shards) {
      for_each_param_in(p, sh.begin, sh.end,
                        [&](const model::ParamSpec& s, int64_t lo, int64_t hi) {
                          const Region r = param_region(s, lo, hi);
                          const bool pad = is_vocab_parameter(s.name);
                          const int64_t m = moment_index(c.opt_shards, lo);
                          const kernels::Ctx& on = c.exp_avg.on_host(m) ? host : device;
                          read(kExpAvg + s.name, r, c.exp_avg.at(m), pad, on);
                          read(kExpAvgSq + s.name, r, c.exp_avg_sq.at(m), pad, on);
                        });
    }
  }
  g.world->barrier();
  if (g.world->rank() == 0) {
    const double dt = now_seconds() - t0;
    log_info("loaded checkpoint {} (iteration {}): {:.1f} MB on rank 0 in {:.2f} s", dir,
             m.iteration, double(bytes) / 1e6, dt);
  }
  return m;
}

std::optional<std::string> find_checkpoint(const std::string& load_dir) {
  const fs::path root(load_dir);
  if (fs::exists(root / "manifest.json")) return root.string();
  const fs::path marker = root / kMarker;
  if (!fs::exists(marker)) return std::nullopt;
  const std::string text = marker_text(root);
  fs::path dir;
  if (text == "release") {
    dir = root / "release";
  } else {
    MT_CHECK(is_iteration_number(text), marker.string(),
             " does not hold an iteration number (got '", text, "')");
    dir = root / iteration_dir_name(std::stoll(text));
  }
  MT_CHECK(fs::exists(dir / "manifest.json"), marker.string(), " names ", dir.string(),
           ", which is missing or incomplete (no manifest.json)");
  return dir.string();
}

void add_expert_bias_states(ChunkState& c, model::GPTChunk& chunk) {
  for (model::MoELayer* l : chunk.moe_layers()) {
    c.states.push_back({l->prefix() + "router.expert_bias",
                        {int64_t(l->expert_bias().size())},
                        l->expert_bias().data()});
  }
}

}  // namespace mtron::checkpoint
