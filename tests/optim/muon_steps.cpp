// Runs Muon (optim/muon.h) on one parameter for muon_test.py, which checks it against Megatron's
// Muon written in PyTorch. Usage: muon_steps DIR, where DIR holds
//   case.json  {"shape": [...], "qkv_rows": [...], "momentum", "nesterov", "scale_mode",
//               "extra_scale", "coefficients", "ns_steps", "bf16", "lr", "weight_decay",
//               "grad_scale", "steps"}
//   w.bin      the weight (fp32, numel(shape)), grads.bin the steps' gradients (steps x numel)
// and gets w_out.bin and m_out.bin (the weight and momentum after the steps).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/optim/muon.h"

namespace {

std::vector<float> read(const std::string& path, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(path, std::ios::binary);
  MT_CHECK(f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float))), path,
           ": expected ", n, " floats");
  return v;
}

void write(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  MT_CHECK(bool(f), path, ": write failed");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mtron;
  if (argc != 2) {
    std::fprintf(stderr, "usage: muon_steps DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  nlohmann::json c;
  std::ifstream(dir + "/case.json") >> c;
  optim::MuonConfig cfg;
  cfg.momentum = c["momentum"];
  cfg.nesterov = c["nesterov"];
  cfg.scale = *value_of(optim::kMuonScaleNames, c["scale_mode"].get<std::string>());
  cfg.extra_scale = c["extra_scale"];
  cfg.coefficients = c["coefficients"];
  cfg.ns_steps = c["ns_steps"];
  cfg.bf16 = c["bf16"];
  optim::MuonMatrix m;
  m.global = c["shape"].get<Shape>();
  m.local = m.global;
  m.qkv_rows = c["qkv_rows"].get<std::vector<int64_t>>();
  const size_t n = size_t(numel(m.global));
  const int steps = c["steps"];
  std::vector<float> w = read(dir + "/w.bin", n), grads = read(dir + "/grads.bin", n * steps);
  std::vector<float> mom(n, 0.0f);
  optim::Muon muon(cfg, {});
  for (int s = 0; s < steps; ++s) {
    muon.step(m, w.data(), grads.data() + size_t(s) * n, nullptr, DType::kBF16, mom.data(),
              c["lr"].get<double>(), c["weight_decay"].get<float>(), c["grad_scale"].get<float>());
  }
  write(dir + "/w_out.bin", w);
  write(dir + "/m_out.bin", mom);
  return 0;
}
