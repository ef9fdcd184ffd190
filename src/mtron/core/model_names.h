// defines: EnumName, kNormalizationNames, kPositionEmbeddingNames, kRouterLoadBalancingNames,
//          kRouterScoreNames, kTokenDropPolicyNames, name_of, value_of
//
// Megatron's spelling of each value of ModelConfig's enums, in one table per enum: the model
// flags take these choices (core/model_flags.h), model_flag_args writes them, and a checkpoint's
// manifest stores and reads them (checkpoint/manifest.h).
#pragma once

#include <optional>
#include <string_view>

#include "mtron/core/error.h"
#include "mtron/core/model_config.h"

namespace mtron {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

inline constexpr EnumName<Normalization> kNormalizationNames[] = {
    {Normalization::kLayerNorm, "LayerNorm"}, {Normalization::kRMSNorm, "RMSNorm"}};
inline constexpr EnumName<PositionEmbedding> kPositionEmbeddingNames[] = {
    {PositionEmbedding::kLearnedAbsolute, "learned_absolute"},
    {PositionEmbedding::kRope, "rope"},
    {PositionEmbedding::kNone, "none"}};
inline constexpr EnumName<RouterLoadBalancing> kRouterLoadBalancingNames[] = {
    {RouterLoadBalancing::kAuxLoss, "aux_loss"},
    {RouterLoadBalancing::kSeqAuxLoss, "seq_aux_loss"},
    {RouterLoadBalancing::kSinkhorn, "sinkhorn"},
    {RouterLoadBalancing::kNone, "none"}};
inline constexpr EnumName<RouterScore> kRouterScoreNames[] = {{RouterScore::kSoftmax, "softmax"},
                                                              {RouterScore::kSigmoid, "sigmoid"}};
inline constexpr EnumName<TokenDropPolicy> kTokenDropPolicyNames[] = {
    {TokenDropPolicy::kProbs, "probs"}, {TokenDropPolicy::kPosition, "position"}};

// The name of v in its table (an internal error for a value the table lacks).
template <typename E, size_t N>
const char* name_of(const EnumName<E> (&names)[N], E v) {
  for (const EnumName<E>& n : names)
    if (n.value == v) return n.name;
  MT_ASSERT(false, "a value without a name: ", int(v));
}

// The value named s in the table; nullopt when no entry has that name.
template <typename E, size_t N>
std::optional<E> value_of(const EnumName<E> (&names)[N], std::string_view s) {
  for (const EnumName<E>& n : names)
    if (s == n.name) return n.value;
  return std::nullopt;
}

}  // namespace mtron
