#!/usr/bin/python3
"""Megatron-LM's own functional-test configurations (megatron_configs/*.yaml, each with its source
in its first line), run with `mtron train --print-layout` at 8 ranks, as Megatron's CI runs them
on one 8-GPU node: every flag of MODEL_ARGS must be accepted (or noted), the layout printed, the
notes expected for the config's checkpoint, scheduling and checking flags said, and what the
layout report must show of the pipeline split, the schedule and the model (SHOWN).

MODEL_ARGS is turned into a command line as Megatron's test harness does
(tests/functional_tests/shell_test_utils/_run_training.sh): `--flag: true` is the switch, `false`
leaves it out, a value in square brackets follows the flag as its words ("[384 384 97656250]"),
any other value as one argument; ${VAR}/$VAR placeholders (data, checkpoint and tokenizer paths)
become /nonexistent, which --print-layout never opens.

  megatron_configs_test.py MTRON
"""
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_configs")
# Notes each config must produce (beyond accepting every flag).
NOTES = {
    "mr_mcore_te_tp1_pp4_persistent_ckpt_disable_bias_linear":
        ["--use-persistent-ckpt-worker has no effect", "--dist-ckpt-save-pre-mcore-014 has no effect"],
    "mr_mcore_te_tp1_pp4_vp1_dist_optimizer_overlap_grad_reduce_param_gather_overlap_optimizer":
        ["--overlap-param-gather-with-optimizer-step has no effect"],
    "mr_mcore_te_tp2_pp1_multi_dist_optimizer_instances":
        ["--num-distributed-optimizer-instances 2 has no effect"],
    "mr_mcore_reruns_disable": ["--rerun-mode disabled has no effect"],
    "mr_mcore_te_tp2_pp2_ddp_average_in_collective": ["--ddp-average-in-collective has no effect"],
    "mcore_te_tp2_pp2_ep4_etp1_memory_speed": ["--cross-entropy-fusion-impl native has no effect"],
    "mr_mcore_te_tp1_pp4_vp1_uneven_pipeline": [],
    "mr_mcore_te_tp1_pp4_vp2_account_for_embedding_loss_in_pipeline_split": [],
    "mr_mcore_te_tp1_pp2_rope_embeddings_interleaved_no_fusion": ["--no-rope-fusion has no effect"],
    "mr_mcore_te_tp1_pp4_vp1_tunable_overlap": [],
    "345m_nightly_mcore_tp2_cp2_pp2_ep2_te_4experts2parallel":
        ["--no-bias-gelu-fusion has no effect"],
    "mr_mcore_te_tp2_pp2_ep4_etp1_mtp_resume_torch_dist_fp8": ["--moe-grouped-gemm has no effect"],
    "mr_mcore_te_tp4_pp1_qk_layernorm_test_mode": [],
    "mr_mcore_te_tp2_pp2_mla": [],
    "mr_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental":
        ["--overlap-moe-expert-parallel-comm has no effect"],
    "mr_mcore_te_tp1_pp2_cp4_a2a_p2p_nondeterministic": [],
    "gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor": ["--use-persistent-ckpt-worker has no effect"],
    "gpt3_mcore_te_tp2_pp1_fsdp2_resume_torch_dist": ["--async-save has no effect"],
    "gpt3_moe_mcore_te_ep8_resume_torch_dist_dist_muon":
        ["--no-use-layer-wise-param-layout has no effect"],
    "gpt3_moe_mcore_te_ep8_resume_torch_dist_muon": ["--use-persistent-ckpt-worker has no effect"],
    "deepseek_proxy_fsdp_ep2_fsdp2": ["--fp8-param-gather has no numeric effect"],
    "gpt3_15b_8t_release": ["--wandb-project megatron-core-release-runs: mtron does not talk"],
    "gpt3_15b_8t_release_gb200":
        ["--wandb-project megatron-core-release-runs: mtron does not talk to Weights & Biases; the "
         "last rank writes the scalars W&B would get to /nonexistent as TensorBoard event files; "
         "upload them with `wandb sync --sync-tensorboard -p megatron-core-release-runs -e adlr "
         "/nonexistent`"],
}
# What --print-layout must show for a config (its pipeline split and schedule): 12 layers over
# PP4 with 2 on the first and last stages; 6 layers over PP4 x VPP2 with the embedding and the
# loss counted as layers, so that the first and last virtual stages hold none; the interleaved
# schedule's micro-batches in one group of 5 (M = 40 / (4 x DP2)); the model summary naming the
# interleaved RoPE, the Sinkhorn top-1 routing, multi-latent attention (in FP8) with an MTP depth,
# or multi-latent attention with learned positions (Megatron's default position type); Muon's
# settings; the selective recompute of four modules; CP4 as all-to-all groups of 2 and a ring of
# 2 (--hierarchical-context-parallel-sizes given as one argument, "2 2"); Megatron-FSDP's and
# FSDP2's sharding; the release runs' step batch schedule, whose validation batch is Megatron's
# global_batch_size default (micro-batch x DP: 4 x 1) unless --eval-global-batch-size sets it;
# a DeepSeek-style proxy under Megatron-FSDP with experts over EP 2, in FP8 without --bf16.
SHOWN = {
    "mr_mcore_te_tp1_pp4_vp1_uneven_pipeline":
        ["    0  [0, 2) +embedding", "    1  [2, 6)", "    3  [10, 12) +output layer and loss"],
    "mr_mcore_te_tp1_pp4_vp2_account_for_embedding_loss_in_pipeline_split":
        ["    0  (no layers) +embedding [3, 4)", "    3  [2, 3) (no layers) +output layer and loss"],
    "mr_mcore_te_tp1_pp4_vp1_tunable_overlap":
        ["DP 2 x PP 4 (VPP 3, micro-batch groups of 5)"],
    "mr_mcore_te_tp1_pp2_rope_embeddings_interleaved_no_fusion": ["RoPE (interleaved)"],
    "345m_nightly_mcore_tp2_cp2_pp2_ep2_te_4experts2parallel":
        ["MoE 4 experts top-1 (Sinkhorn)", "TP 2 x CP 2 x DP 1 x PP 2"],
    "mr_mcore_te_tp2_pp2_ep4_etp1_mtp_resume_torch_dist_fp8":
        ["MLA (q rank 1536, kv rank 512", "+1 MTP +output layer and loss"],
    "mr_mcore_te_tp2_pp2_mla": ["learned positions", "MLA (q rank 192, kv rank 64"],
    "mr_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental":
        ["activation recompute: selective (moe_act layernorm mla_up_proj mlp)"],
    "mr_mcore_te_tp1_pp2_cp4_a2a_p2p_nondeterministic":
        ["CP 4 x DP 1 x PP 2, CP by a2a+p2p (all-to-all over 2, ring over 2)"],
    "gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor":
        ["TP 2 x CP 1 x DP 4 x PP 1, Megatron-FSDP optim_grads_params"],
    "gpt3_mcore_te_tp2_pp1_fsdp2_resume_torch_dist": ["DP 4 x PP 1, FSDP2"],
    "gpt3_moe_mcore_te_ep8_resume_torch_dist_dist_muon":
        ["optimizer: Muon (momentum 0.9, spectral scale x 0.2, quintic Newton-Schulz x 5 in bf16",
         "; layer-wise distributed optimizer"],
    "gpt3_moe_mcore_te_ep8_resume_torch_dist_muon":
        ["optimizer: Muon (momentum 0.9, spectral scale x 0.2"],
    "deepseek_proxy_fsdp_ep2_fsdp2":
        ["experts ETP 1 x EP 2 x EDP 4, Megatron-FSDP optim_grads_params"],
    "gpt3_15b_8t_release": ["global batch size: step schedule 0:384 48828125:768 97656250:1152 "
                            "(samples:batch); 50863 iterations; validation batch 4"],
    "gpt3_15b_8t_release_gb200": ["global batch size: step schedule 0:384 48828125:768 "
                                  "97656250:1152 (samples:batch); 50863 iterations\n"],
}


def model_args(path):
    args, inside = [], False
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("MODEL_ARGS:"):
            inside = True
            continue
        if inside and line.lstrip().startswith("#"):  # a YAML comment, indented or not
            continue
        if inside and line and not line.startswith(" "):
            break
        m = re.match(r"\s+(--[\w-]+):\s*(.*?)\s*(#.*)?$", line) if inside else None
        if not m:
            continue
        flag, value = m.group(1), m.group(2).strip("\"'").strip()
        if value.lower() == "false":
            continue
        args.append(flag)
        value = re.sub(r"\$\{?\w+\}?", "/nonexistent", value)
        # _run_training.sh's cases: true is the switch; "[a b c]" loses its brackets and gives one
        # argument per word (--rampup-batch-size); anything else is one argument, spaces and all.
        # The value passes `xargs` (quotes and backslashes) and, without spaces, the shell's eval
        # (backslashes again): the layout "Et*3\\|\\(tt\\|\\)*6tmL" arrives as "Et*3|(tt|)*6tmL".
        if value.lower() == "true":
            continue
        value = " ".join(shlex.split(value))
        if re.fullmatch(r"\[[^]]+\]", value):
            args += value[1:-1].split()
        elif " " in value:
            args.append(value)
        else:
            args += shlex.split(value)
    return args


def main():
    mtron, failed = sys.argv[1], 0
    for name in sorted(NOTES):
        args = model_args(os.path.join(HERE, name + ".yaml"))
        p = subprocess.run([mtron, "train"] + args + ["--print-layout", "--world-size", "8"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        missing = [n for n in NOTES[name] if "note: " + n not in p.stdout]
        missing += [r for r in SHOWN.get(name, []) if r not in p.stdout]
        ok = p.returncode == 0 and "world 8 = " in p.stdout and not missing
        print("%-90s %s" % (name, "ok" if ok else "FAILED (exit %d, missing %s)" % (p.returncode, missing)))
        if not ok:
            print(p.stdout[-2000:])
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
