// defines: gemm_cases, gemm_fp8_cases (op_table_gemm.cpp): the op table's GEMM cases
#pragma once

#include "op_checker.h"

namespace mtron::kernels::test {

void gemm_cases(Checker& ck, bool small);
void gemm_fp8_cases(Checker& ck);

}  // namespace mtron::kernels::test
