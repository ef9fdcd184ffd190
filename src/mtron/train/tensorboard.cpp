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
}

EventFile::EventFile(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MT_CHECK(!ec, "--tensorboard-dir ", dir, ": cannot create the directory: ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}.{}", std::time(nullptr), host, getpid()))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  MT_CHECK(f_, "--tensorboard-dir ", dir, ": cannot write ", path_, ": ", std::strerror(errno));
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

TensorBoard::TensorBoard(const TensorBoardArgs& a, int64_t world_size, Device device)
    : a_(a), world_size_(world_size), device_(device), file_(a.dir) {}

void TensorBoard::iteration(const TensorBoardStep& s) {
  if (s.iteration % a_.log_interval != 0) return;
  auto both = [&](const std::string& tag, double v) {
    file_.scalar(tag, v, s.iteration);
    file_.scalar(tag + " vs samples", v, s.consumed_samples);
  };
  both("learning-rate", s.learning_rate);
  if (s.decoupled_learning_rate)
    file_.scalar("decoupled-learning-rate", *s.decoupled_learning_rate, s.iteration);
  both("batch-size", double(s.batch_size));
  both("lm loss", s.lm_loss);
  if (a_.log_loss_scale) both("loss-scale", s.loss_scale);
  if (a_.log_world_size) both("world-size", double(world_size_));
  if (s.grad_norm) both("grad-norm", *s.grad_norm);
  for (const auto& [name, v] : s.aux_losses) file_.scalar(name, v, s.iteration);
  if (a_.log_memory) {
    const kernels::DeviceMemory m = kernels::device_memory(device_);
    file_.scalar("mem-reserved-bytes", double(m.reserved), s.iteration);
    file_.scalar("mem-allocated-bytes", double(m.allocated), s.iteration);
    file_.scalar("mem-max-allocated-bytes", double(m.max_allocated), s.iteration);
  }
  file_.flush();
}

void TensorBoard::timers(int64_t iteration, double seconds, double tflops) {
  if (!a_.log_timers) return;
  file_.scalar("iteration-time", seconds, iteration);
  file_.scalar("throughput", tflops, iteration);
  file_.flush();
}

void TensorBoard::validation(int64_t iteration, int64_t consumed, double loss) {
  file_.scalar("lm loss validation", loss, iteration);
  file_.scalar("lm loss validation vs samples", loss, consumed);
  if (a_.log_validation_ppl) {
    const double ppl = std::exp(std::min(20.0, loss));
    file_.scalar("lm loss validation ppl", ppl, iteration);
    file_.scalar("lm loss validation ppl vs samples", ppl, consumed);
  }
  file_.flush();
}

}  // namespace mtron::train
