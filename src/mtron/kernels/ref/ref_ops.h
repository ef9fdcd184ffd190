// defines: mtron::kernels::ref::* — naive reference kernels, for tests only (header-only)
//
// Plain loops, accumulation in double (long double for the double instantiation), never
// optimised, no threads. Templated on the float type: the float instantiation is what the fast
// CPU kernels are compared with; the double one is what backward passes are checked against by
// central finite differences. Same contracts as kernels/*.h unless a comment says otherwise.
#pragma once

// One header per op family, each defining its templates (instantiated for float and double):
#include "mtron/kernels/ref/activation.h"
#include "mtron/kernels/ref/adamw.h"
#include "mtron/kernels/ref/attention.h"
#include "mtron/kernels/ref/elementwise.h"
#include "mtron/kernels/ref/embedding.h"
#include "mtron/kernels/ref/fp8.h"
#include "mtron/kernels/ref/gemm.h"
#include "mtron/kernels/ref/moe.h"
#include "mtron/kernels/ref/muon.h"
#include "mtron/kernels/ref/norm.h"
#include "mtron/kernels/ref/rope.h"
#include "mtron/kernels/ref/xent.h"
