#!/usr/bin/python3
"""Reference numbers for tests/plan/test_formulas.cpp: runs Megatron-LM's own
megatron/training/theoretical_memory_usage.py (HEAD d98e8a6) on the configurations the test
uses and prints weight_and_optimizer / activation bytes. Megatron's file is loaded from a
checkout given as the first argument (it is not part of mtron):

  /usr/bin/python3 tests/plan/megatron_memory_reference.py /path/to/Megatron-LM
"""
import sys
import types

src = open(sys.argv[1] + "/megatron/training/theoretical_memory_usage.py").read()
src = src.replace("from .utils import is_hybrid_model, print_rank_0", "")
mod = types.ModuleType("tmu")
mod.is_hybrid_model = lambda args: False
mod.print_rank_0 = lambda *a, **k: None
exec(compile(src, "theoretical_memory_usage.py", "exec"), mod.__dict__)


def pad(vocab, tp):
    m = 128 * tp
    return (vocab + m - 1) // m * m


def args(**kw):
    base = dict(kv_channels=None, group_query_attention=False, num_query_groups=1,
                num_experts=None, swiglu=False, moe_shared_expert_intermediate_size=None,
                moe_layer_freq=1, moe_ffn_hidden_size=None, mtp_num_layers=None,
                normalization="LayerNorm", multi_latent_attention=False,
                untie_embeddings_and_output_weights=False, moe_latent_size=None,
                moe_router_topk=2, add_bias_linear=True, expert_model_parallel_size=1,
                expert_tensor_parallel_size=None, virtual_pipeline_model_parallel_size=None,
                use_distributed_optimizer=False, sequence_parallel=False,
                recompute_granularity=None, context_parallel_size=1)
    base.update(kw)
    a = types.SimpleNamespace(**base)
    if a.kv_channels is None:
        a.kv_channels = a.hidden_size // a.num_attention_heads
    if a.expert_tensor_parallel_size is None:
        a.expert_tensor_parallel_size = a.tensor_model_parallel_size
    a.data_parallel_size = a.world_size // (a.tensor_model_parallel_size *
                                            a.pipeline_model_parallel_size *
                                            a.context_parallel_size)
    return a


configs = {
    "llama2_70b_tp4_pp4_dp4_distopt_sp_selective": args(
        num_layers=80, hidden_size=8192, num_attention_heads=64, ffn_hidden_size=28672,
        group_query_attention=True, num_query_groups=8, swiglu=True, normalization="RMSNorm",
        untie_embeddings_and_output_weights=True, add_bias_linear=False, seq_length=4096,
        padded_vocab_size=pad(32000, 4), tensor_model_parallel_size=4,
        pipeline_model_parallel_size=4, world_size=64, micro_batch_size=1,
        use_distributed_optimizer=True, sequence_parallel=True, recompute_granularity="selective",
        num_microbatches=256),
    "gpt3_175b_tp8_pp8_vpp2_sp_selective": args(
        num_layers=96, hidden_size=12288, num_attention_heads=96, ffn_hidden_size=4 * 12288,
        seq_length=2048, padded_vocab_size=pad(50257, 8), tensor_model_parallel_size=8,
        pipeline_model_parallel_size=8, world_size=512, micro_batch_size=1,
        virtual_pipeline_model_parallel_size=2, sequence_parallel=True,
        recompute_granularity="selective", num_microbatches=192),
    "mixtral_8x7b_tp2_ep4_distopt": args(
        num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336,
        group_query_attention=True, num_query_groups=8, swiglu=True, normalization="RMSNorm",
        untie_embeddings_and_output_weights=True, add_bias_linear=False, seq_length=4096,
        padded_vocab_size=pad(32000, 2), tensor_model_parallel_size=2,
        pipeline_model_parallel_size=1, world_size=8, micro_batch_size=1, num_experts=8,
        moe_ffn_hidden_size=14336, expert_model_parallel_size=4, use_distributed_optimizer=True,
        sequence_parallel=True, num_microbatches=8),
    "deepseek_v3_tp2_ep64_distopt_sp_selective": args(
        num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432,
        swiglu=True, normalization="RMSNorm", untie_embeddings_and_output_weights=True,
        add_bias_linear=False, seq_length=4096, padded_vocab_size=pad(129280, 2),
        tensor_model_parallel_size=2, pipeline_model_parallel_size=1, world_size=128,
        micro_batch_size=1, num_experts=256, moe_ffn_hidden_size=2048, moe_router_topk=8,
        moe_shared_expert_intermediate_size=2048, moe_layer_freq=[0] * 3 + [1] * 58,
        mtp_num_layers=1, multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512,
        qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128, expert_model_parallel_size=64,
        expert_tensor_parallel_size=1, use_distributed_optimizer=True, sequence_parallel=True,
        recompute_granularity="selective", num_microbatches=128),
    "gpt2_124m_pp2_mbs2": args(
        num_layers=12, hidden_size=768, num_attention_heads=12, ffn_hidden_size=3072,
        seq_length=1024, padded_vocab_size=pad(50257, 1), tensor_model_parallel_size=1,
        pipeline_model_parallel_size=2, world_size=2, micro_batch_size=2, num_microbatches=4),
}

for name, a in configs.items():
    nm = a.num_microbatches
    w = mod.compute_weight_and_optimizer_memory(a)
    if a.sequence_parallel and a.recompute_granularity == "selective":
        act = mod.compute_activation_memory(a, num_microbatches=nm)
    else:
        act = mod.compute_activation_memory_without_sp(a, num_microbatches=nm)
    print(f"{name}: weight_and_optimizer={w!r} activation={act!r}")
