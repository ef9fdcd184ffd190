// make_nccl_comm in a build without CUDA: one clear error instead of a link failure.
#include "mtron/comm/nccl.h"
#include "mtron/core/error.h"

namespace mtron {

std::unique_ptr<Comm> make_nccl_comm(Comm&, void*) {
  throw Error("the NCCL backend needs a CUDA build of mtron (configure with -DMTRON_CUDA=ON)");
}

}  // namespace mtron
