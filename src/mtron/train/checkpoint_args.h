// defines: apply_checkpoint_args
//
// --use-checkpoint-args: the model's flags taken from the checkpoint --load designates, by
// Megatron's rules (load_args_from_checkpoint): the shape's sizes (--num-layers, --hidden-size,
// --ffn-hidden-size, --seq-length, --num-attention-heads, --kv-channels,
// --max-position-embeddings) where the command line leaves them unset; the rest of what Megatron
// takes (query groups, position embeddings and RoPE, biases, --swiglu, tied embeddings,
// normalisation, dropout, the experts' count, placement, size, top-k, pre-softmax and shared
// expert, the tokenizer type) whatever the command line says; the tokenizer model unless
// --no-use-tokenizer-model-from-checkpoint-args; with --use-mp-args-from-checkpoint-args the
// tensor, pipeline (and virtual) and expert parallel sizes. What Megatron does not take
// (--qk-layernorm, multi-latent attention, --norm-epsilon, ...) stays the command line's, and
// loading then checks it against the checkpoint. Without a checkpoint in --load the flags stay
// as given, with a note, as in Megatron.
#pragma once

#include "mtron/train/args.h"

namespace mtron::train {

// Applies the checkpoint's arguments to `a` (a.checkpoint.use_checkpoint_args set) before the
// flags are validated, noting what it changed in a.notes; throws mtron::Error without --load or
// on an unreadable manifest.
void apply_checkpoint_args(TrainArgs& a);

}  // namespace mtron::train
