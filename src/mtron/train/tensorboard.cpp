#include "mtron/train/tensorboard.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "mtron/checkpoint/crc32c.h"
#include "mtron/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mtron::train {
namespace {

// Protocol-buffer wire format: a field key is (number << 3) | wire type.
enum Wire : uint8_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}
void put_key(std::string& out, int field, Wire w) {
  put_varint(out, uint64_t(field) << 3 | w);
}
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts (x86-64, aarch64)
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& s) {
  put_key(out, field, kBytes);
  put_varint(out, s.size());
  out += s;
}

uint32_t masked_crc(const void* p, size_t n) {
  const uint32_t c = checkpoint::crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event{wall_time = 1, step = 2} plus the payload fields already encoded.
std::string event(int64_t step, const std::string& payload) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_fixed<double>(e, wall_seconds());
  if (step != 0) {
    put_key(e, 2, kVarint);
    put_varint(e, uint64_t(step));
  }
  return e + payload;
}

}  // namespace

void add_tensorboard_flags(CLI::App& app, TensorBoardArgs& a, const char* group) {
  app.add_option("--tensorboard-dir", a.dir,
                 "Write TensorBoard event files here (on the last rank)")
      ->group(group);
  app.add_option("--tensorboard-log-interval", a.log_interval,
                 "Iterations between TensorBoard points (default 1)")
      ->group(group);
  app.add_flag("--log-timers-to-tensorboard", a.log_timers,
               "Also iteration-time and throughput, at --log-interval")
      ->group(group);
  app.add_flag_callback(
         "--no-log-loss-scale-to-tensorboard", [&a] { a.log_loss_scale = false; },
         "Do not write loss-scale")
      ->group(group);
  app.add_flag("--log-validation-ppl-to-tensorboard", a.log_validation_ppl,
               "Also the validation perplexity")
      ->group(group);
  app.add_flag("--log-memory-to-tensorboard", a.log_memory, "Also mem-* (device memory bytes)")
      ->group(group);
  app.add_flag("--log-world-size-to-tensorboard", a.log_world_size, "Also world-size")
      ->group(group);
  app.add_option("--wandb-project", a.wandb_project,
                 "Weights & Biases project: mtron writes the scalars W&B would get as TensorBoard "
                 "event files in --wandb-save-dir (`wandb sync --sync-tensorboard` uploads them)")
      ->group(group);
  app.add_option("--wandb-exp-name", a.wandb_exp_name, "W&B run name (needed with a project)")
      ->group(group);
  app.add_option("--wandb-entity", a.wandb_entity, "W&B entity (team or user)")->group(group);
  app.add_option("--wandb-save-dir", a.wandb_save_dir,
                 "Directory of the W&B event files (default <save>/wandb)")
      ->group(group);
}

std::string wandb_dir(const TensorBoardArgs& a, const std::string& save) {
  if (a.wandb_project.empty()) return "";
  if (!a.wandb_save_dir.empty()) return a.wandb_save_dir;
  return save.empty() ? "" : (std::filesystem::path(save) / "wandb").string();
}

void validate_wandb_flags(const TensorBoardArgs& a,
                          const std::string& save,
                          std::vector<std::string>& notes) {
  if (a.wandb_project.empty()) {
    std::vector<std::string> set;
    if (!a.wandb_exp_name.empty()) set.push_back("--wandb-exp-name");
    if (!a.wandb_entity.empty()) set.push_back("--wandb-entity");
    if (!a.wandb_save_dir.empty()) set.push_back("--wandb-save-dir");
    if (!set.empty())
      notes.push_back(fmt::format("{}: no effect without --wandb-project", fmt::join(set, ", ")));
    return;
  }
  MT_CHECK(!a.wandb_exp_name.empty(), "--wandb-project ", a.wandb_project,
           " needs --wandb-exp-name (the W&B run's name), as in Megatron");
  const std::string dir = wandb_dir(a, save);
  MT_CHECK(!dir.empty(), "--wandb-project ", a.wandb_project,
           " needs --wandb-save-dir DIR or --save DIR (then <save>/wandb) for its event files");
  notes.push_back(fmt::format(
      "--wandb-project {}: mtron does not talk to Weights & Biases; the last rank writes the "
      "scalars W&B would get to {} as TensorBoard event files; upload them with `wandb sync "
      "--sync-tensorboard -p {}{} {}`",
      a.wandb_project, dir, a.wandb_project, a.wandb_entity.empty() ? "" : " -e " + a.wandb_entity,
      dir));
}

EventFile::EventFile(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MT_CHECK(!ec, flag, " ", dir, ": cannot create the directory: ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}.{}", std::time(nullptr), host, getpid()))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  MT_CHECK(f_, flag, " ", dir, ": cannot write ", path_, ": ", std::strerror(errno));
  std::string version;
  put_bytes(version, 3, "brain.Event:2");
  record(event(0, version));
  flush();
}

EventFile::~EventFile() {
  if (f_) std::fclose(f_);
}

void EventFile::record(const std::string& data) {
  std::string r;
  put_fixed<uint64_t>(r, data.size());
  put_fixed<uint32_t>(r, masked_crc(r.data(), 8));
  r += data;
  put_fixed<uint32_t>(r, masked_crc(data.data(), data.size()));
  MT_CHECK(std::fwrite(r.data(), 1, r.size(), f_) == r.size(), "cannot write ", path_, ": ",
           std::strerror(errno));
}

void EventFile::scalar(const std::string& tag, double value, int64_t step) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_key(v, 2, kFixed32);
  put_fixed<float>(v, float(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string payload;
  put_bytes(payload, 5, summary);
  record(event(step, payload));
}

void EventFile::flush() {
  std::fflush(f_);
}

TensorBoard::TensorBoard(const TensorBoardArgs& a,
                         const std::string& save,
                         int64_t world_size,
                         Device device)
    : a_(a), world_size_(world_size), device_(device) {
  if (!a.dir.empty()) files_.push_back(std::make_unique<EventFile>(a.dir, "--tensorboard-dir"));
  const std::string w = wandb_dir(a, save);
  if (!w.empty())
    files_.push_back(std::make_unique<EventFile>(w, a.wandb_save_dir.empty()
                                                        ? "--save (the W&B directory <save>/wandb)"
                                                        : "--wandb-save-dir"));
}

void TensorBoard::scalar(const std::string& tag, double value, int64_t step) {
  for (const auto& f : files_) f->scalar(tag, value, step);
}

void TensorBoard::flush() {
  for (const auto& f : files_) f->flush();
}

void TensorBoard::iteration(const TensorBoardStep& s) {
  if (s.iteration % a_.log_interval != 0) return;
  auto both = [&](const std::string& tag, double v) {
    scalar(tag, v, s.iteration);
    scalar(tag + " vs samples", v, s.consumed_samples);
  };
  both("learning-rate", s.learning_rate);
  if (s.decoupled_learning_rate)
    scalar("decoupled-learning-rate", *s.decoupled_learning_rate, s.iteration);
  both("batch-size", double(s.batch_size));
  both("lm loss", s.lm_loss);
  if (a_.log_loss_scale) both("loss-scale", s.loss_scale);
  if (a_.log_world_size) both("world-size", double(world_size_));
  if (s.grad_norm) both("grad-norm", *s.grad_norm);
  for (const auto& [name, v] : s.aux_losses) scalar(name, v, s.iteration);
  if (a_.log_memory) {
    const kernels::DeviceMemory m = kernels::device_memory(device_);
    scalar("mem-reserved-bytes", double(m.reserved), s.iteration);
    scalar("mem-allocated-bytes", double(m.allocated), s.iteration);
    scalar("mem-max-allocated-bytes", double(m.max_allocated), s.iteration);
  }
  flush();
}

void TensorBoard::timers(int64_t iteration, double seconds, double tflops) {
  if (!a_.log_timers) return;
  scalar("iteration-time", seconds, iteration);
  scalar("throughput", tflops, iteration);
  flush();
}

void TensorBoard::validation(int64_t iteration, int64_t consumed, double loss) {
  scalar("lm loss validation", loss, iteration);
  scalar("lm loss validation vs samples", loss, consumed);
  if (a_.log_validation_ppl) {
    const double ppl = std::exp(std::min(20.0, loss));
    scalar("lm loss validation ppl", ppl, iteration);
    scalar("lm loss validation ppl vs samples", ppl, consumed);
  }
  flush();
}

}  // namespace mtron::train
