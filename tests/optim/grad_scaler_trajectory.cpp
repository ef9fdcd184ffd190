// Prints the loss scaler's trajectory for a found-inf sequence, one line per step:
//   <step> <found_inf> <scale> <growth_tracker> <hysteresis_tracker>
// (the state after update). Usage:
//   grad_scaler_trajectory INITIAL MIN WINDOW HYSTERESIS SEQUENCE   dynamic; SEQUENCE of 0/1
//   grad_scaler_trajectory static SCALE SEQUENCE                     --loss-scale SCALE
// grad_scaler_test.py compares it with Megatron's DynamicGradScaler written in Python.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mtron/optim/grad_scaler.h"

int main(int argc, char** argv) {
  using mtron::optim::GradScaler;
  using mtron::optim::GradScalerConfig;
  GradScalerConfig cfg;
  std::string seq;
  if (argc == 4 && std::string(argv[1]) == "static") {
    cfg.static_scale = std::strtod(argv[2], nullptr);
    seq = argv[3];
  } else if (argc == 6) {
    cfg.initial_scale = std::strtod(argv[1], nullptr);
    cfg.min_scale = std::strtod(argv[2], nullptr);
    cfg.window = std::strtoll(argv[3], nullptr, 10);
    cfg.hysteresis = std::strtoll(argv[4], nullptr, 10);
    seq = argv[5];
  } else {
    std::fprintf(stderr,
                 "usage: grad_scaler_trajectory INITIAL MIN WINDOW HYSTERESIS SEQ | "
                 "static SCALE SEQ\n");
    return 2;
  }
  GradScaler s(cfg);
  for (size_t i = 0; i < seq.size(); ++i) {
    const bool inf = seq[i] == '1';
    s.update(inf);
    std::printf("%zu %d %.9g %lld %lld\n", i + 1, int(inf), double(s.scale()),
                static_cast<long long>(s.state().growth_tracker),
                static_cast<long long>(s.state().hysteresis_tracker));
  }
  return 0;
}
