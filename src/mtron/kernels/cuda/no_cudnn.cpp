// run_graph, cudnn_graph_support, cudnn_in_build and cudnn_device_json (sdpa_graph.h) in a CUDA
// build without cuDNN (CMake found no cudnn.h or libcudnn): no graph runs, and attention stays on
// mtron's own kernels.
#include "mtron/core/error.h"
#include "mtron/kernels/cuda/sdpa_graph.h"

namespace mtron::kernels::cuda {

bool run_graph(cudaStream_t, const SdpaGraph&, const std::vector<Binding>&) {
  return false;
}

GraphSupport cudnn_graph_support(const SdpaGraph&, const std::string&) {
  GraphSupport r;
  r.note = "mtron was built without cuDNN";
  return r;
}

bool cudnn_in_build() {
  return false;
}

std::string cudnn_device_json() {
  throw Error("cuDNN's device properties: mtron was built without cuDNN");
}

}  // namespace mtron::kernels::cuda
