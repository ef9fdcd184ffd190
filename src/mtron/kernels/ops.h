// defines: MTRON_KERNEL_OPS, the list of every kernel op (kernels/op.h explains the rows)
#pragma once

#include "mtron/kernels/activation.h"
#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/embedding.h"
#include "mtron/kernels/fp8.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/moe.h"
#include "mtron/kernels/muon.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/rope.h"
#include "mtron/kernels/xent.h"

#define MTRON_KERNEL_OPS(OP) \
  MTRON_GEMM_OPS(OP)         \
  MTRON_ELEMENTWISE_OPS(OP)  \
  MTRON_EMBEDDING_OPS(OP)    \
  MTRON_NORM_OPS(OP)         \
  MTRON_ACTIVATION_OPS(OP)   \
  MTRON_ROPE_OPS(OP)         \
  MTRON_ATTENTION_OPS(OP)    \
  MTRON_XENT_OPS(OP)         \
  MTRON_MOE_OPS(OP)          \
  MTRON_ADAMW_OPS(OP)        \
  MTRON_MUON_OPS(OP)         \
  MTRON_FP8_OPS(OP)
