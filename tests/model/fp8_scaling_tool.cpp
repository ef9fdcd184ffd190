// fp8_scaling_tool LEN ALGO MARGIN FP8_MAX < amaxes: runs delayed_scaling_update (model/fp8.h)
// on one tensor's state (history of LEN, scale 1) with each amax read from stdin in turn, and
// prints after each step the scale and the history, as float bit patterns in hex.
// fp8_scaling_reference.py compares them with its own implementation of the recipe.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mtron/model/fp8.h"

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: fp8_scaling_tool LEN most_recent|max MARGIN FP8_MAX < amaxes\n");
    return 2;
  }
  const size_t len = size_t(std::atoi(argv[1]));
  const auto algo = std::string(argv[2]) == "max" ? mtron::model::Fp8AmaxAlgo::kMax
                                                  : mtron::model::Fp8AmaxAlgo::kMostRecent;
  const int margin = std::atoi(argv[3]);
  const float fp8_max = std::strtof(argv[4], nullptr);
  mtron::model::Fp8Scaling s{std::vector<float>(len, 0.0f), 1.0f};
  uint32_t u;
  while (std::scanf("%x", &u) == 1) {
    float amax;
    std::memcpy(&amax, &u, 4);
    mtron::model::delayed_scaling_update(s, amax, fp8_max, margin, algo);
    std::printf("%08x", bits(s.scale));
    for (const float h : s.history) std::printf(" %08x", bits(h));
    std::printf("\n");
  }
  return 0;
}
