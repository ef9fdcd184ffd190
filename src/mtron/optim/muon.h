// defines: MuonScale, kMuonScaleNames, MuonConfig, MuonMatrix, ns_coefficients, Muon
//
// Muon (Megatron's --optimizer muon, with the emerging_optimizers package's arithmetic): for a
// 2-D weight W with gradient G (already clipped by the global norm), momentum mu, learning rate
// lr and weight decay wd,
//   W *= 1 - lr wd;  M = mu M + (1 - mu) G;  U = nesterov ? mu M + (1 - mu) G : M
//   W -= lr * extra * scale(rows, cols) * NS(U)
// NS orthogonalises U by a Newton-Schulz iteration: X = U / max(|U|_F, 1e-15) (of U^T when U has
// more rows than columns, so that the Gram matrix A is the smaller one), then for each step's
// coefficients (a, b, c): A = X X^T, B = b A + c A A, X = a X + B X. scale: spectral
// sqrt(max(rows, cols)), unit_rms_norm sqrt(rows / cols), shape_scaling sqrt(max(1, rows / cols)).
// With bf16 (--muon-fp32-matmul-prec medium, Megatron's default) X, A and B are held in bf16
// and every product accumulates in fp32 (torch's bf16 addmm); otherwise all is fp32.
//
// A parameter is one matrix of its global shape [all dims but the last flattened, last] (SwiGLU's
// [2, F, h] fc1 is [2F, h], gate over up): a slice held by a tensor-parallel group is gathered
// into the global order first and every rank orthogonalises the whole matrix, then keeps its
// slice. Every layout thus computes the same matrices in the same order, bit for bit. A fused QKV
// weight ([groups][q | k | v rows] x h) is orthogonalised as three matrices, all groups' q rows,
// k rows and v rows (Megatron's --muon-split-qkv default).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/core/model_names.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/ctx.h"

namespace mtron::optim {

enum class MuonScale { kSpectral, kUnitRmsNorm, kShapeScaling };
// --muon-scale-mode's names (the flag, the manifest and the run's log).
inline constexpr EnumName<MuonScale> kMuonScaleNames[] = {
    {MuonScale::kSpectral, "spectral"},
    {MuonScale::kUnitRmsNorm, "unit_rms_norm"},
    {MuonScale::kShapeScaling, "shape_scaling"}};

struct MuonConfig {
  float momentum = 0.9f;  // Megatron's --muon-momentum default
  bool nesterov = false;
  MuonScale scale = MuonScale::kSpectral;
  float extra_scale = 1.0f;
  std::string coefficients = "quintic";
  int ns_steps = 5;
  bool bf16 = true;
  bool split_qkv = true;  // a fused QKV weight as three matrices (trainer's ranges use it)

  // "Muon (momentum 0.9, ...) for the weight matrices, AdamW for the rest", for the run's log.
  std::string describe() const;
};

// The coefficients (a, b, c) of each of `steps` Newton-Schulz steps of a named set (simple,
// quintic, polar_express, cans, aol, deepseekv4, cubic5): the set's list cycled, or for
// polar_express, cans and deepseekv4 its last entry repeated. Empty for an unknown name, or for
// cubic5 (a fixed five-step schedule) at another step count.
std::vector<std::array<float, 3>> ns_coefficients(const std::string& type, int steps);
// The names ns_coefficients knows, for messages.
std::string ns_coefficient_names();

// A parameter Muon steps, in its buffer.
struct MuonMatrix {
  int64_t begin = 0;  // its first element (the whole parameter is on this rank's shard)
  Shape global, local;
  int shard_dim = -1;  // sliced along this dim of `global` over `group` (-1: whole here)
  int64_t shard_offset = 0;
  Comm* group = nullptr;
  std::vector<int64_t> qkv_rows;  // a fused QKV weight's q, k and v rows per query group
  bool weight_decay = true;
};

class Muon {
 public:
  Muon(const MuonConfig& cfg, const kernels::Ctx& k);
  // One step of `m`: master and grad are its buffer's, compute its bf16/fp16 copy (or null),
  // momentum its momentum (local elements). grad_scale is the clipping factor.
  void step(const MuonMatrix& m,
            float* master,
            const float* grad,
            void* compute,
            DType compute_dtype,
            float* momentum,
            double lr,
            float weight_decay,
            float grad_scale);

 private:
  // x [r, c] (on the device, in x_) replaced by scale * NS(x).
  void orthogonalize(int64_t r, int64_t c, float scale);
  float* buffer(Tensor& t, int64_t n, DType dtype = DType::kF32);

  MuonConfig cfg_;
  std::vector<std::array<float, 3>> coeffs_;
  kernels::Ctx k_;
  Tensor u_, stage_, full_, x_, y_, a_, b_, xb_, ab_, bb_, norm_;
};

}  // namespace mtron::optim
