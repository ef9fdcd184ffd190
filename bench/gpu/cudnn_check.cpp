// cudnn_check: whether cuDNN takes mtron's attention graphs (kernels/cuda/sdpa_graph.h), forward
// and backward, at the shapes training uses, on this GPU or, without one, on a GPU that a file of
// cuDNN's device properties describes.
//
//   cudnn_check                        the current device (bench/gpu/run.sh on a GPU)
//   cudnn_check --device FILE          deviceless: cuDNN's heuristics and kernel compilation for
//                                      the GPU FILE describes (bench/gpu/h200.cudnn.json; loading
//                                      the compiled kernels needs a driver: the check stops there)
//   cudnn_check --print-device         prints the current device's description (for --device)
//
// Deviceless, cuDNN still opens the CUDA driver library to compile its kernels: the toolkit's stub
// (lib64/stubs/libcuda.so, as libcuda.so.1 on LD_LIBRARY_PATH) serves; scripts/run-tests.sh does
// so after the CUDA build. A line per graph: the heuristics' engine configurations, those that can
// run it and their engines' global indices (cuDNN's numbers for its kernel families), and what
// became of the first one's plan. The backward twice: deterministic (mtron's default) and with dq
// accumulated atomically ("bwd nd", AttnShape::nondeterministic). Exit 1 when a model shape's graph
// has no engine that plans (or, deviceless, compiles); the small shapes (the op table's) are
// reported, not required: where cuDNN declines one, mtron's own kernels run it.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/kernels/cuda/sdpa_graph.h"
#include "mtron/kernels/device.h"

namespace {

using namespace mtron;
using namespace mtron::kernels;
using namespace mtron::kernels::cuda;

struct Case {
  const char* name;
  AttnShape s;
  bool causal;
  bool required;  // a model's shape
};

AttnShape shape(int64_t B, int64_t S, int64_t H, int64_t G, int64_t D, int64_t Dv = 0) {
  AttnShape s{B, S, S, H, G, D, Dv ? Dv : D, 1.0f / std::sqrt(float(D))};
  s.bf16_products = true;
  return s;
}

std::string read_file(const char* path) {
  std::ifstream f(path);
  MT_CHECK(f.good(), "--device ", path, ": cannot read the file");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_json;
  try {
    if (!cudnn_in_build()) {
      std::printf(
          "cudnn_check: mtron was built without cuDNN (attention runs on its own kernels)\n");
      return 0;
    }
    if (argc == 2 && std::strcmp(argv[1], "--print-device") == 0) {
      init_device(Device::kCUDA, 0);
      std::printf("%s\n", cudnn_device_json().c_str());
      return 0;
    }
    if (argc == 3 && std::strcmp(argv[1], "--device") == 0) {
      device_json = read_file(argv[2]);
    } else if (argc != 1) {
      std::fprintf(stderr, "usage: cudnn_check [--device FILE | --print-device]\n");
      return 2;
    } else {
      init_device(Device::kCUDA, 0);
    }
    AttnShape fused = shape(4, 1024, 12, 12, 64);
    fused.fused_qkv = true;
    const std::vector<Case> cases = {
        {"gpt2-124m", shape(16, 1024, 12, 12, 64), true, true},
        {"gpt2-124m fused QKV", fused, true, true},
        {"1.3b", shape(8, 2048, 16, 16, 128), true, true},
        {"llama GQA 32/8", shape(1, 4096, 32, 8, 128), true, true},
        {"head dim 256", shape(1, 1024, 8, 8, 256), true, false},
        {"MLA 192/128", shape(1, 1024, 16, 16, 192, 128), true, false},
        {"small 33, GQA", shape(2, 33, 4, 2, 24), true, false},
        {"small 130, MQA", shape(1, 130, 4, 1, 64), true, false},
        {"small full", shape(2, 67, 2, 1, 16), false, false},
    };
    std::printf("%-22s %-6s %8s %7s %-9s %s\n", "shape", "pass", "engines", "viable", "engine",
                "plan");
    int bad = 0;
    for (const Case& c : cases) {
      const AttnMask mask{c.causal, 0};
      MT_CHECK(sdpa_takes(c.s, mask), "cudnn_check: case ", c.name, " is not one the graphs take");
      for (const char* pass : {"fwd", "bwd", "bwd nd"}) {  // nd: AttnShape::nondeterministic
        const bool fwd = pass[0] == 'f';
        AttnShape s = c.s;
        s.nondeterministic = std::strcmp(pass, "bwd nd") == 0;
        const SdpaGraph& g = fwd ? sdpa_forward_graph(s, mask) : sdpa_backward_graph(s, mask);
        const GraphSupport r = cudnn_graph_support(g, device_json);
        const bool ok = device_json.empty() ? r.planned : r.compiled;
        if (c.required && !ok) ++bad;
        std::string ids;
        for (int64_t id : r.engine_ids) ids += str(ids.empty() ? "" : ",", id);
        std::printf("%-22s %-6s %8lld %7lld %-9s %s%s\n", c.name, pass,
                    static_cast<long long>(r.engines), static_cast<long long>(r.viable),
                    ids.c_str(), r.note.c_str(), ok || !c.required ? "" : "   <- REQUIRED");
      }
    }
    std::printf("%s\n", bad ? "cudnn_check: FAILED (a model shape's graph has no engine)"
                            : "cudnn_check: every model shape's graphs have an engine");
    if (bad && !device_json.empty())
      std::printf(
          "(deviceless, cuDNN drops every engine when it cannot open libcuda.so.1: the "
          "toolkit's lib64/stubs/libcuda.so under that name on LD_LIBRARY_PATH)\n");
    return bad ? 1 : 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "cudnn_check: %s\n", ex.what());
    return 1;
  }
}
