// defines: ExpertParallel, sum_over_tokens, gather_over_tokens, DispatchPlan
//
// Expert parallelism (Megatron's --expert-model-parallel-size with the alltoall token
// dispatcher). Experts live on Megatron's expert grid (ETP x EP x EDP x PP): EP rank j holds
// experts [j*El, (j+1)*El) (El = E / EP), each split over the ETP group like a TP MLP (fc1
// column-parallel, fc2 row-parallel).
//
// A rank's routed (token, expert) pairs, sorted by expert, are its "local" rows [P, C]. The plan
// moves them to the ranks holding their experts and back:
//
//   to_experts   local[P, C] -> expert[R, C]: all-to-all over EP (rows for EP rank j go to j),
//                all-gather over ETP (every ETP rank of an expert sees all of its rows), then
//                expert-major order (local expert, then ETP rank, then EP source rank, then
//                the source's order)
//   from_experts expert[R, C] -> local[P, C]: the adjoint: source order, reduce-scatter over
//                ETP (sums the ETP ranks' partial rows), all-to-all back over EP
//
// Dispatch forward is to_experts, its backward from_experts; combine forward is from_experts
// (of fc2's partial output), its backward to_experts. Bytes each rank sends per call: the rows
// it sends to other EP ranks times C floats (Comm::bytes_sent of all_to_all_v), plus with ETP
// > 1 the all-gather / reduce-scatter of the EP-received rows.
#pragma once

#include <cstdint>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/core/arena.h"
#include "mtron/kernels/ctx.h"

namespace mtron::parallel {

struct ExpertParallel {
  Comm* ep = nullptr;   // expert-parallel group (null when size 1)
  Comm* etp = nullptr;  // expert tensor-parallel group (null when size 1)
  // The ranks that split one micro-batch's tokens (TP with sequence parallelism x CP): router
  // statistics (aux-loss counts, capacity decisions) are taken over this group.
  Comm* tokens = nullptr;
  int64_t ep_rank = 0, ep_size = 1;
  int64_t etp_rank = 0, etp_size = 1;
};

// The router's statistics over one micro-batch's tokens (ep.tokens: its group of ranks, null or
// size 1 when one rank holds them all): x[n] summed in place over the group; every rank's
// mine[n] concatenated in rank order into all[n * group size].
void sum_over_tokens(const ExpertParallel& ep, double* x, int64_t n);
void gather_over_tokens(const ExpertParallel& ep, const double* mine, double* all, int64_t n);

class DispatchPlan {
 public:
  DispatchPlan() = default;
  // counts[E] (host): this rank's rows for each global expert (the local rows are in that
  // order). Collective over EP and ETP (exchanges the counts). The rows move on k's device.
  DispatchPlan(const kernels::Ctx& k,
               const ExpertParallel& ep,
               const int64_t* counts,
               int64_t num_experts);

  int64_t local_rows() const { return local_rows_; }    // P
  int64_t expert_rows() const { return expert_rows_; }  // R
  int64_t local_experts() const { return local_experts_; }
  // Expert-major rows of local expert e: [expert_begin(e), expert_begin(e + 1)).
  int64_t expert_begin(int64_t e) const { return expert_begin_[size_t(e)]; }
  // f(e, begin, rows) for each local expert e that has rows, in order.
  template <typename F>
  void for_each_expert(F&& f) const {
    for (int64_t e = 0; e < local_experts_; ++e) {
      const int64_t b = expert_begin(e), n = expert_begin(e + 1) - b;
      if (n > 0) f(e, b, n);
    }
  }

  // expert[R, C] <- local[P, C]
  void to_experts(float* expert, const float* local, int64_t C, Arena& scratch) const;
  // local[P, C] <- expert[R, C] (sums over ETP)
  void from_experts(float* local, const float* expert, int64_t C, Arena& scratch) const;

 private:
  // A run of rows in the ETP-gathered order (ETP rank q, EP source s, local expert e) and where
  // it sits in expert-major order.
  struct Segment {
    int64_t gathered, expert, rows;
  };

  kernels::Ctx k_;
  Comm* ep_ = nullptr;
  Comm* etp_ = nullptr;
  int64_t ep_size_ = 1, etp_size_ = 1;
  int64_t local_experts_ = 0;
  int64_t local_rows_ = 0, expert_rows_ = 0;
  std::vector<int64_t> send_rows_;     // [EP] local rows going to each EP rank
  std::vector<int64_t> recv_rows_;     // [EP] rows arriving from each EP rank
  std::vector<int64_t> etp_rows_;      // [ETP] EP-received rows of each ETP rank
  std::vector<int64_t> expert_begin_;  // [El + 1]
  std::vector<Segment> segments_;
};

}  // namespace mtron::parallel
