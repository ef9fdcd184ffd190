// run_graph (sdpa_graph.h) in a CUDA build without cuDNN (CMake found no cudnn.h or libcudnn):
// no graph runs, and attention stays on mtron's own kernels.
#include "mtron/kernels/cuda/sdpa_graph.h"

namespace mtron::kernels::cuda {

bool run_graph(cudaStream_t, const SdpaGraph&, const std::vector<Binding>&) {
  return false;
}

}  // namespace mtron::kernels::cuda
