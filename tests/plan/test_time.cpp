// The time model's pieces: collectives, GEMMs, link placement, the pipeline bubble, MFU.
#include <gtest/gtest.h>

#include <cmath>

#include "mtron/plan/time_model.h"
#include "util.h"

namespace mtron::plan {
namespace {

TEST(Time, RingCollectives) {
  const Link l{100e9, 0, "test"};
  const double B = 1e9;
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kAllReduce, B, 4, l), 2 * 0.75 * B / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kAllGather, B, 4, l), 0.75 * B / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kReduceScatter, B, 8, l), 0.875 * B / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kSendRecv, B, 2, l), B / 100e9);
  EXPECT_EQ(collective_seconds(Collective::kAllReduce, B, 1, l), 0);
  const Link slow{100e9, 1e-5, "test"};
  EXPECT_GT(collective_seconds(Collective::kAllReduce, 1, 8, slow), 1e-4);  // latency-bound
}

TEST(Time, GemmRooflineOnGpusSumOnCpus) {
  PerfParams p;
  p.gemm_flops = 1e12;
  p.gemm_bandwidth = 1e9;
  p.gemm_overhead = 0;
  p.gemm_overlaps_memory = true;
  const double M = 64, N = 64, K = 64;  // 524288 FLOP, 8192*2 + 16384 bytes in bf16
  const double bytes = gemm_operand_bytes(M, N, K, Precision::kBF16);
  EXPECT_DOUBLE_EQ(bytes, 2 * (64 * 64 * 2) + 4 * 64 * 64);
  EXPECT_DOUBLE_EQ(gemm_seconds(p, M, N, K, Precision::kBF16),
                   std::max(2 * M * N * K / 1e12, bytes / 1e9));
  p.gemm_overlaps_memory = false;
  EXPECT_DOUBLE_EQ(gemm_seconds(p, M, N, K, Precision::kBF16), 2 * M * N * K / 1e12 + bytes / 1e9);
  p.gemm_k_overhead = 64;  // doubles the math at K = 64
  EXPECT_DOUBLE_EQ(gemm_seconds(p, M, N, K, Precision::kBF16),
                   2 * 2 * M * N * K / 1e12 + bytes / 1e9);
}

TEST(Time, GroupsUseTheRightLinks) {
  const PerfParams p = perf_from_hardware(test::gpus("h100-sxm", 64), Precision::kBF16);
  EXPECT_EQ(p.link_for_group(8, 1).name, "NVLink");
  EXPECT_EQ(p.link_for_group(16, 1).name, "ib-ndr400");  // TP16 crosses nodes
  // A DP group strided by TP8 has one member per node: one adapter's bandwidth.
  EXPECT_DOUBLE_EQ(p.link_for_group(8, 8).bandwidth, 50e9 * 0.85);
  // Strided by 2, four members per node share four adapters.
  EXPECT_DOUBLE_EQ(p.link_for_group(32, 2).bandwidth, 4 * 50e9 * 0.85);
  const PerfParams pcie = perf_from_hardware(test::gpus("h100-pcie", 8), Precision::kBF16);
  EXPECT_EQ(pcie.link_for_group(2, 1).name, "NVLink");
  EXPECT_EQ(pcie.link_for_group(4, 1).name, "PCIe");
}

// An all-to-all inside a node runs on its link as a ring collective would; across nodes each rank
// sends the part for other nodes through its own adapter (no sharing of the node's adapters, as
// a ring crossing between nodes has), beside the part for its node on NVLink.
TEST(Time, AllToAllAcrossNodesGoesThroughEachRanksAdapter) {
  const PerfParams p = perf_from_hardware(test::gpus("h100-sxm", 1024), Precision::kBF16);
  const double B = 1e9;
  EXPECT_DOUBLE_EQ(all_to_all_seconds(p, B, 8, 1),
                   collective_seconds(Collective::kAllToAll, B, 8, p.link_for_group(8, 1)));
  // EP64, 8 ranks per node: 56/64 of the bytes leave the node at one adapter's 50 GB/s (x 0.85),
  // 7/64 stay on NVLink at the same time.
  const double steps = 2 * std::log2(64.0) + 1;
  EXPECT_DOUBLE_EQ(all_to_all_seconds(p, B, 64, 1),
                   56.0 / 64 * B / (50e9 * 0.85) + steps * p.network.latency);
  // Strided by ETP 2: 4 ranks per node, 60/64 leave it.
  EXPECT_DOUBLE_EQ(all_to_all_seconds(p, B, 64, 2),
                   60.0 / 64 * B / (50e9 * 0.85) + steps * p.network.latency);
  // The ring formula on the node's summed adapters would be 7x faster: the model's old figure.
  EXPECT_GT(all_to_all_seconds(p, B, 64, 1),
            6 * collective_seconds(Collective::kAllToAll, B, 64, p.link_for_group(64, 1)));
}

// --cp-comm-type: the ring hides behind attention, all_gather and the heads' all-to-all do not;
// the all-to-all costs 3 exchanges of q, k, v and the output per layer and micro-batch (one
// forward, two backward); a2a+p2p adds a ring across its groups; a per-layer list costs the
// mean of its layers' types. The computation is the same for all.
TEST(Time, ContextParallelCommunicationTypes) {
  const ModelConfig m =
      test::model("llama3-8b", {"--seq-length", "32768", "--max-position-embeddings", "32768"});
  const Cluster c = test::gpus("h100-sxm", 16);
  const PerfParams perf = perf_from_hardware(c, Precision::kBF16);
  auto time = [&](std::vector<std::string> type, std::vector<int64_t> hcp = {},
                  Precision prec = Precision::kBF16) {
    Layout l;
    l.precision = prec;
    l.parallel = tests::layout({.world = 16, .cp = 8, .mbs = 1, .gbs = 8});
    l.parallel.cp_comm_type = std::move(type);
    l.parallel.hierarchical_context_parallel_sizes = std::move(hcp);
    l.parallel.finalize(m);
    return estimate_step_time(m, l, perf_from_hardware(c, prec));
  };
  const StepTime ring = time({"p2p"}), gather = time({"all_gather"}), a2a = time({"a2a"}),
                 hier = time({"a2a+p2p"}, {2, 4});
  for (const StepTime* t : {&gather, &a2a, &hier}) {
    EXPECT_DOUBLE_EQ(t->gemm, ring.gemm);
    EXPECT_DOUBLE_EQ(t->attention, ring.attention);
  }
  // 4096 tokens of a rank x (32 query heads + 8 + 8 groups + 32 output heads) x 128 x 2 bytes,
  // over CP8 in one node; 32 layers, 4 micro-batches (DP2); forward and backward once each (the
  // head-sharded tensors kept), in fp32 twice backward (4 bytes an element)
  const double x = 4096.0 * (32 + 8 + 8 + 32) * 128 * 2;
  EXPECT_NEAR(a2a.cp_comm, 4 * 32 * 2 * all_to_all_seconds(perf, x, 8, 1), 1e-9 * a2a.cp_comm);
  EXPECT_NEAR(time({"a2a"}, {}, Precision::kFP32).cp_comm,
              4 * 32 * 3 * all_to_all_seconds(perf, 2 * x, 8, 1), 1e-9 * a2a.cp_comm);
  EXPECT_GT(gather.cp_comm, ring.cp_comm);  // the same bytes, exposed
  EXPECT_GT(hier.cp_comm, 4 * 32 * 3 * all_to_all_seconds(perf, x, 2, 1));
  std::vector<std::string> half(16, "a2a");
  half.resize(32, "p2p");
  EXPECT_NEAR(time(half).cp_comm, (a2a.cp_comm + ring.cp_comm) / 2, 1e-9 * ring.cp_comm);
}

Layout make(const ModelConfig& m, int64_t world, int64_t tp, int64_t pp, int64_t vpp, int64_t gbs) {
  return test::layout(m, {.world = world, .tp = tp, .pp = pp, .vpp = vpp, .mbs = 1, .gbs = gbs});
}

// An MTP depth runs on the last stage (a layer, eh_proj, a pass of the output layer): the step
// gets slower and its GEMM time grows.
TEST(Time, MtpDepthSlowsTheLastStage) {
  const ModelConfig m = test::model("llama3-8b");
  const ModelConfig d = test::model("llama3-8b", {"--mtp-num-layers", "1"});
  const Cluster c = test::gpus("h100-sxm", 8);
  const PerfParams perf = perf_from_hardware(c, Precision::kBF16);
  const StepTime a = estimate_step_time(m, make(m, 8, 1, 8, 0, 64), perf);
  const StepTime b = estimate_step_time(d, make(d, 8, 1, 8, 0, 64), perf);
  EXPECT_GT(b.total, a.total);
  EXPECT_GT(b.gemm, a.gemm);
}

TEST(Time, PipelineBubbleIsPMinus1OverVM) {
  // Balanced stages: a tiny vocabulary so the first/last stage extras vanish.
  const ModelConfig m = test::model("gpt3-6.7b", {"--vocab-size", "128"});
  const Cluster c = test::gpus("h100-sxm", 8);
  const PerfParams perf = perf_from_hardware(c, Precision::kBF16);
  for (auto [v, gbs] : {std::pair{0, 16}, std::pair{0, 64}, std::pair{2, 16}, std::pair{4, 32}}) {
    const Layout l = make(m, 8, 1, 8, v, gbs);
    const StepTime t = estimate_step_time(m, l, perf);
    const double work = t.gemm + t.attention + t.elementwise + t.pp_p2p;
    const double want = 7.0 / (double(l.parallel.vpp()) * gbs);
    EXPECT_NEAR(t.pp_bubble / work, want, 0.05 * want) << "vpp " << v << " m " << gbs;
  }
}

TEST(Time, ThroughputFiguresAreConsistent) {
  const ModelConfig m = test::model("llama2-7b");
  const Cluster c = test::gpus("h100-sxm", 8);
  const PerfParams perf = perf_from_hardware(c, Precision::kBF16);
  const Layout l = make(m, 8, 2, 1, 0, 64);
  const StepTime t = estimate_step_time(m, l, perf);
  const double flops = flops_per_iteration(m, 64, m.padded_vocab_size(2));
  EXPECT_NEAR(t.tflops_per_device * 1e12 * 8 * t.total / flops, 1.0, 1e-12);
  EXPECT_NEAR(t.mfu, t.tflops_per_device * 1e12 / 989.4e12, 1e-12);
  EXPECT_NEAR(t.tokens_per_second * t.total, 64.0 * 4096, 1e-6);
  EXPECT_GT(t.tp_comm, 0);
  EXPECT_LT(t.mfu, 0.7);
  EXPECT_GT(t.mfu, 0.3);
  // TP beyond the NVLink domain cannot hide its collectives behind GEMMs (userbuffers need
  // NVLink) and pays the network's latency on every layer.
  const Cluster two_nodes = test::gpus("h100-sxm", 16);
  Layout tp16 = make(test::model("llama2-13b", {"--num-attention-heads", "80"}), 16, 16, 1, 0, 16);
  Layout tp8 = make(test::model("llama2-13b", {"--num-attention-heads", "80"}), 16, 8, 1, 0, 16);
  tp16.tp_comm_overlap = tp8.tp_comm_overlap = true;
  const PerfParams p16 = perf_from_hardware(two_nodes, Precision::kBF16);
  const ModelConfig m13 = test::model("llama2-13b", {"--num-attention-heads", "80"});
  EXPECT_GT(estimate_step_time(m13, tp16, p16).tp_comm,
            4 * estimate_step_time(m13, tp8, p16).tp_comm);
}

}  // namespace
}  // namespace mtron::plan

namespace mtron::plan {
namespace {

// --overlap-moe-expert-parallel-comm: one micro-batch's all-to-alls behind another's
// computation. DeepSeek-V3 on 1024 H100s with EP64 across nodes (TP2, no pipeline): the exposed
// all-to-all time shrinks, the rest of the step stays; the search applies it only where Megatron
// allows it (EP, an interleaved schedule when pipelined, no full recompute).
TEST(Time, ExpertAllToAllOverlapHidesBehindComputation) {
  const ModelConfig m = test::model("deepseek-v3");
  const Cluster c = test::gpus("h100-sxm", 1024);
  const PerfParams pp = perf_from_hardware(c, Precision::kBF16);
  Layout l = test::layout(m, {.world = 1024, .tp = 2, .ep = 64, .etp = 1, .mbs = 1, .gbs = 8192});
  const StepTime plain = estimate_step_time(m, l, pp);
  l.ep_comm_overlap = true;
  const StepTime over = estimate_step_time(m, l, pp);
  EXPECT_GT(plain.ep_comm, 0);
  EXPECT_LT(over.ep_comm, 0.8 * plain.ep_comm);
  EXPECT_DOUBLE_EQ(over.gemm, plain.gemm);
  EXPECT_LT(over.total, plain.total);

  // Mixtral 8x7B on 128 H100s with EP8: the search's layouts overlap where Megatron allows it.
  const ModelConfig mixtral = test::model("mixtral-8x7b");
  const Cluster c128 = test::gpus("h100-sxm", 128);
  auto overlapping = [&](int64_t vpp, RecomputeGranularity rc) {
    SearchOptions o;
    o.precision = Precision::kBF16;
    o.global_batch_size = 512;
    o.tp = 1;
    o.pp = 4;
    o.vpp = vpp;
    o.ep = 8;
    o.recompute = rc;
    o.ep_comm_overlap = true;
    const SearchResult r = test::plan(mixtral, c128, o);
    int n = 0, with = 0;
    for (const auto& list : {r.plans, r.too_big}) {
      for (const Candidate& cand : list) {
        ++n;
        with += cand.layout.ep_comm_overlap;
      }
    }
    EXPECT_GT(n, 0);
    return with == n ? 1 : with == 0 ? 0 : -1;  // all, none, or some
  };
  EXPECT_EQ(overlapping(2, RecomputeGranularity::kSelective), 1);
  EXPECT_EQ(overlapping(2, RecomputeGranularity::kFull), 0);       // full recompute
  EXPECT_EQ(overlapping(1, RecomputeGranularity::kSelective), 0);  // PP without interleaving
}

}  // namespace
}  // namespace mtron::plan
