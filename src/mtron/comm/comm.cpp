#include "mtron/comm/comm.h"

#include "mtron/core/error.h"

namespace mtron {

void Comm::all_to_all_v(const void* send,
                        const int64_t* send_counts,
                        const int64_t* send_displs,
                        void* recv,
                        const int64_t* recv_counts,
                        const int64_t* recv_displs,
                        DType t) {
  const int me = rank();
  MT_ASSERT(send_counts[me] == recv_counts[me], "all_to_all_v: this rank sends ", send_counts[me],
            " elements to itself but expects ", recv_counts[me]);
  int64_t sent = 0;
  for (int r = 0; r < size(); ++r) {
    MT_ASSERT(send_counts[r] >= 0 && recv_counts[r] >= 0, "all_to_all_v: negative count");
    if (r != me) sent += send_counts[r];
  }
  all_to_all_v_impl({send, send_counts, send_displs, recv, recv_counts, recv_displs, t, sent});
}

double Comm::all_reduce_sum(double x) {
  all_reduce(&x, 1, DType::kF64, ReduceOp::kSum);
  return x;
}

double Comm::all_reduce_max(double x) {
  all_reduce(&x, 1, DType::kF64, ReduceOp::kMax);
  return x;
}

}  // namespace mtron
