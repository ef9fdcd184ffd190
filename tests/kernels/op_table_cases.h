// defines: gemm_cases, gemm_fp8_cases (op_table_gemm.cpp), attention_cases
//          (op_table_attention.cpp), stream_cases, memory_cases (op_table_device.cpp): the op
//          table's cases in files of their own
#pragma once

#include "op_checker.h"

namespace mtron::kernels::test {

void gemm_cases(Checker& ck, bool small);
void gemm_fp8_cases(Checker& ck);
void attention_cases(Checker& ck, bool small);
void stream_cases(Checker& ck);
void memory_cases(Checker& ck);

}  // namespace mtron::kernels::test
