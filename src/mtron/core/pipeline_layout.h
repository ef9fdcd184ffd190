// defines: parse_pipeline_layout
//
// Megatron's --pipeline-model-parallel-layout string: the pipeline's virtual stages in order,
// separated by '|', each a sequence of E (embedding), t (transformer layer), m (multi-token
// prediction layer) and L (output layer and loss). "x*n" repeats x n times, "(...)*n" repeats a
// group (no nesting), commas are cosmetic: "Et*3|(tt|)*29,m|L" is a first stage with the embedding
// and 3 layers, 29 stages of 2 layers, a stage with the MTP layer and a last one with the loss.
// Stage k of the list is virtual stage k: model chunk k / PP of pipeline rank k % PP.
#pragma once

#include <string>
#include <vector>

namespace mtron {

// The stages of `layout`, each expanded to its symbols ("Ettt", "tt", ..., "" for an empty
// stage); throws mtron::Error naming the flag and the character for one other than E, t, m, L.
// ParallelConfig::finalize checks the stages against the model.
std::vector<std::string> parse_pipeline_layout(const std::string& layout);

}  // namespace mtron
