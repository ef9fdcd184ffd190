#include "mtron/parallel/expert_dispatch.h"

#include <cstring>
#include <numeric>

#include "mtron/core/error.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::parallel {

namespace {

// Displacements (exclusive prefix sums) of `counts`, each scaled by C.
std::vector<int64_t> scaled(const std::vector<int64_t>& rows, int64_t C) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * C;
  return out;
}
std::vector<int64_t> displs(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

void sum_over_tokens(const ExpertParallel& ep, double* x, int64_t n) {
  if (ep.tokens && ep.tokens->size() > 1) ep.tokens->all_reduce(x, n, DType::kF64, ReduceOp::kSum);
}

void gather_over_tokens(const ExpertParallel& ep, const double* mine, double* all, int64_t n) {
  if (ep.tokens && ep.tokens->size() > 1) {
    ep.tokens->all_gather(mine, all, n, DType::kF64);
  } else if (n > 0) {
    std::memcpy(all, mine, sizeof(double) * size_t(n));
  }
}

DispatchPlan::DispatchPlan(const kernels::Ctx& k,
                           const ExpertParallel& ep,
                           const int64_t* counts,
                           int64_t num_experts)
    : k_(k), ep_(ep.ep), etp_(ep.etp), ep_size_(ep.ep_size), etp_size_(ep.etp_size) {
  MT_ASSERT(num_experts % ep_size_ == 0, "experts (", num_experts, ") not divisible by EP (",
            ep_size_, ")");
  const int64_t El = num_experts / ep_size_, EP = ep_size_, ETP = etp_size_;
  local_experts_ = El;
  local_rows_ = std::accumulate(counts, counts + num_experts, int64_t(0));
  send_rows_.assign(size_t(EP), 0);
  for (int64_t e = 0; e < num_experts; ++e) send_rows_[size_t(e / El)] += counts[e];

  // got[s][e]: rows EP rank s sends for our local expert e; all[q][s][e] the same for every ETP
  // rank q of our expert group.
  std::vector<int64_t> got(size_t(EP * El));
  if (EP > 1) {
    const std::vector<int64_t> n(size_t(EP), El);
    const std::vector<int64_t> d = displs(n);
    ep_->all_to_all_v(counts, n.data(), d.data(), got.data(), n.data(), d.data(), DType::kI64);
  } else {
    std::memcpy(got.data(), counts, sizeof(int64_t) * size_t(El));
  }
  std::vector<int64_t> all(size_t(ETP * EP * El));
  if (ETP > 1) {
    etp_->all_gather(got.data(), all.data(), EP * El, DType::kI64);
  } else {
    all = got;
  }

  recv_rows_.assign(size_t(EP), 0);
  for (int64_t s = 0; s < EP; ++s)
    for (int64_t e = 0; e < El; ++e) recv_rows_[size_t(s)] += got[size_t(s * El + e)];
  etp_rows_.assign(size_t(ETP), 0);
  std::vector<int64_t> per_expert(size_t(El), 0);
  for (int64_t q = 0; q < ETP; ++q)
    for (int64_t s = 0; s < EP; ++s)
      for (int64_t e = 0; e < El; ++e) {
        const int64_t n = all[size_t((q * EP + s) * El + e)];
        etp_rows_[size_t(q)] += n;
        per_expert[size_t(e)] += n;
      }
  expert_begin_.assign(size_t(El + 1), 0);
  for (int64_t e = 0; e < El; ++e)
    expert_begin_[size_t(e + 1)] = expert_begin_[size_t(e)] + per_expert[size_t(e)];
  expert_rows_ = expert_begin_[size_t(El)];

  // Walking the gathered order (q, s, e) visits each expert's rows in its (q, s) order.
  std::vector<int64_t> cursor(expert_begin_.begin(), expert_begin_.end() - 1);
  int64_t g = 0;
  for (int64_t q = 0; q < ETP; ++q)
    for (int64_t s = 0; s < EP; ++s)
      for (int64_t e = 0; e < El; ++e) {
        const int64_t n = all[size_t((q * EP + s) * El + e)];
        if (n > 0) segments_.push_back({g, cursor[size_t(e)], n});
        g += n;
        cursor[size_t(e)] += n;
      }
}

void DispatchPlan::to_experts(float* expert, const float* local, int64_t C, Arena& scratch) const {
  MT_PROFILE("moe.to_experts");
  const int64_t mine = std::accumulate(recv_rows_.begin(), recv_rows_.end(), int64_t(0));
  float* a = scratch.alloc<float>(mine * C);
  if (ep_size_ > 1) {
    const auto sc = scaled(send_rows_, C), rc = scaled(recv_rows_, C);
    const auto sd = displs(sc), rd = displs(rc);
    ep_->all_to_all_v(local, sc.data(), sd.data(), a, rc.data(), rd.data(), DType::kF32);
  } else {
    kernels::copy(k_, a, local, int64_t(sizeof(float)) * mine * C);
  }
  const float* gathered = a;
  if (etp_size_ > 1) {  // all-gather of unequal parts: the same block to every peer
    float* g = scratch.alloc<float>(expert_rows_ * C);
    const std::vector<int64_t> sc(size_t(etp_size_), mine * C), sd(size_t(etp_size_), 0);
    const auto rc = scaled(etp_rows_, C);
    const auto rd = displs(rc);
    etp_->all_to_all_v(a, sc.data(), sd.data(), g, rc.data(), rd.data(), DType::kF32);
    gathered = g;
  }
  for (const Segment& s : segments_) {
    kernels::copy(k_, expert + s.expert * C, gathered + s.gathered * C,
                  int64_t(sizeof(float)) * s.rows * C);
  }
}

void DispatchPlan::from_experts(float* local,
                                const float* expert,
                                int64_t C,
                                Arena& scratch) const {
  MT_PROFILE("moe.from_experts");
  const int64_t mine = std::accumulate(recv_rows_.begin(), recv_rows_.end(), int64_t(0));
  float* g = scratch.alloc<float>(expert_rows_ * C);
  for (const Segment& s : segments_) {
    kernels::copy(k_, g + s.gathered * C, expert + s.expert * C,
                  int64_t(sizeof(float)) * s.rows * C);
  }
  float* a = g;
  if (etp_size_ > 1) {  // reduce-scatter of unequal parts: part q to rank q, summed in rank order
    float* parts = scratch.alloc<float>(etp_size_ * mine * C);
    const auto sc = scaled(etp_rows_, C);
    const auto sd = displs(sc);
    const std::vector<int64_t> rc(size_t(etp_size_), mine * C);
    const auto rd = displs(rc);
    etp_->all_to_all_v(g, sc.data(), sd.data(), parts, rc.data(), rd.data(), DType::kF32);
    a = scratch.alloc<float>(mine * C);
    kernels::copy(k_, a, parts, int64_t(sizeof(float)) * mine * C);
    for (int64_t q = 1; q < etp_size_; ++q) kernels::add(k_, a, a, parts + q * mine * C, mine * C);
  }
  if (ep_size_ > 1) {
    const auto sc = scaled(recv_rows_, C), rc = scaled(send_rows_, C);
    const auto sd = displs(sc), rd = displs(rc);
    ep_->all_to_all_v(a, sc.data(), sd.data(), local, rc.data(), rd.data(), DType::kF32);
  } else {
    kernels::copy(k_, local, a, int64_t(sizeof(float)) * mine * C);
  }
}

}  // namespace mtron::parallel
