// defines: parse_moe_layer_freq, moe_layer_freq_string
//
// Megatron's --moe-layer-freq (arguments.py's moe_freq_type): an integer N (every N-th layer,
// counting from layer 0, is MoE) or a Python list expression of 0 (dense) and 1 (MoE) per layer,
// such as "([0]*3+[1]*58)" or "[0,1,1]". Megatron evaluates the expression with eval() after
// checking that it holds only digits, commas, brackets, parentheses, + and *; mtron evaluates
// that same grammar itself: integers, lists, + (integer sum, list concatenation), * (integer
// product, list repetition by an integer on either side) and parentheses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtron {

// Into `freq` (an integer) or `pattern` (a list; freq then 1). Throws mtron::Error with
// Megatron's "Invalid pattern: <s>" for a malformed expression.
void parse_moe_layer_freq(const std::string& s, int64_t& freq, std::vector<int64_t>& pattern);

// The flag's value for `freq` and `pattern` (the list written out, e.g. "[0,1,1]").
std::string moe_layer_freq_string(int64_t freq, const std::vector<int64_t>& pattern);

}  // namespace mtron
