// defines: GType, GTensor, GMode, GOp, SdpaGraph, SdpaUid, Binding, sdpa_takes,
//          sdpa_forward_graph, sdpa_backward_graph, run_graph, GraphSupport, cudnn_graph_support,
//          cudnn_in_build, cudnn_device_json, attention_forward_cudnn,
//          attention_backward_cudnn
//
// Attention through cuDNN's fused flash attention (its "scaled dot product attention" engines),
// for the bf16 ops with bf16 products and no dropout. cuDNN recognises the attention in a graph
// of elementary operations (matrix products, pointwise operations, reductions, reshapes) over
// 4-d tensors (batch, head, row, column) and runs the whole graph as one fused kernel. The graphs
// are built here as plain data (SdpaGraph): cudnn_graph.cpp hands them to cuDNN's backend API one
// descriptor per tensor and operation; the CUDA emulation (sim/cudnn_graph_sim.cpp) executes the
// very same graph with plain loops, so that CI checks the graphs' operations, shapes and strides
// (the layouts of kernels/attention.h as cuDNN sees them) against the CPU without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtron/kernels/attention.h"
#include "mtron/kernels/cuda/runtime.h"

namespace mtron::kernels::cuda {

// Element types: of a tensor in memory, of a virtual one (never stored: cuDNN keeps it on chip),
// and of an operation's arithmetic.
enum class GType : int8_t { kFloat, kBf16, kInt32, kBool };

// A 4-d tensor: element (i0, i1, i2, i3) at sum i_n stride[n] elements from its address. `uid`
// names it in the graph (and, unless virtual or by value, in run_graph's bindings).
struct GTensor {
  int64_t uid;
  int64_t dim[4], stride[4];
  GType type;
  bool is_virtual;
  bool by_value;  // a scalar passed by value: `value` (dims and strides 1)
  float value;
  // An output (fp32, contiguous) that cuDNN's kernels add partial sums into: zeroed before the
  // graph runs where cuDNN does not zero it itself (before 9.6).
  bool accumulated = false;
};

// Operations: pointwise (the first input's shape; inputs of extent 1 in a dim are broadcast),
// matrix products over the last two dims (batch dims broadcast: an operand of extent n < N in a
// dim serves indices i with i n / N, the heads of a group), reductions (over the dims where the
// output has extent 1, or onto groups of n of them where it has 1/n of the input's), and
// reshapes (the input's elements seen through the output's dims and strides: a transpose).
enum class GOpKind : int8_t { kPointwise, kMatmul, kReduction, kReshape };
enum class GMode : int8_t {
  kNone,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kExp,
  kLog,
  kIdentity,
  kGenIndex,      // the element's index along `axis`
  kCmpGe,         // in0 >= in1
  kBinarySelect,  // in2 ? in0 : in1
  kMax,           // reductions
  kSum,
};
struct GOp {
  GOpKind kind;
  GMode mode = GMode::kNone;
  int in[3] = {-1, -1, -1};  // indices into SdpaGraph::tensors; -1: none
  int out = -1;
  int64_t axis = -1;
  GType compute = GType::kFloat;
};

struct SdpaGraph {
  std::vector<GTensor> tensors;  // GOp::in and GOp::out index them
  std::vector<GOp> ops;          // in execution order
  std::string key;               // the whole graph as text: equal graphs, equal keys
};

// The uids of the tensors in memory.
enum SdpaUid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidStats,  // lse [B, H, Sq] (fp32)
  kUidDO,
  kUidDQ,
  kUidDK,
  kUidDV,
  kUidSum,      // the backward's dO . O per query row [B, H, Sq] (fp32)
  kUidDQAccum,  // the nondeterministic backward's dq accumulator [B, H, Sq, D] (fp32)
};

// A tensor's address in run_graph.
struct Binding {
  int64_t uid;
  const void* ptr;
};

// Whether the graphs express attention of shape s under mask m: bf16 products, no dropout, no
// mask or the causal one without offset (cuDNN's "top left" diagonal), head dims multiples of 8
// (16-byte rows) up to 256, and head strides cuDNN's 4-d tensors can state (the fused QKV layout
// with one query head per group; with several, the heads of a group are not evenly spaced).
bool sdpa_takes(const AttnShape& s, const AttnMask& m);
// out, lse = attention(q, k, v) (uids Q, K, V, O, Stats). Made once per shape and mask, then
// served from a cache (a training step asks for the same few graphs in every layer).
const SdpaGraph& sdpa_forward_graph(const AttnShape& s, const AttnMask& m);
// dq, dk, dv written from dout, q, k, v, out, lse (uids DO, Q, K, V, O, Stats, DQ, DK, DV, and
// Sum: B H Sq floats the graph writes). Deterministic: dQ is one product per row block, with no
// atomic accumulation across key blocks; with AttnShape::nondeterministic dQ = dS K goes to an
// fp32 accumulator (uid DQAccum, B H Sq D floats, contiguous) that cuDNN adds key blocks into
// atomically, then to dq by an identity.
const SdpaGraph& sdpa_backward_graph(const AttnShape& s, const AttnMask& m);

// Runs g on stream st with the tensors at `mem`: true when it ran; false, with nothing run, where
// cuDNN has no engine for the graph (warned once per graph) or is absent from the build. The
// emulation executes the graph with plain loops.
bool run_graph(cudaStream_t st, const SdpaGraph& g, const std::vector<Binding>& mem);

// What cuDNN makes of a graph for a GPU: `device_json` is cuDNN's device-properties description
// of it (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION; deviceless: cuDNN's heuristics and kernel
// compilation run without the GPU), or empty for the current device. engines: the heuristics'
// engine configurations; viable: those that can run the graph there; planned: the first one's
// execution plan finalised (workspace bytes); compiled: its kernels compiled (deviceless, loading
// them fails for want of a driver, so a deviceless check ends there); note: what happened.
struct GraphSupport {
  int64_t engines = 0, viable = 0, workspace = 0;
  std::vector<int64_t> engine_ids;  // the viable configurations' engines (global indices)
  bool planned = false, compiled = false;
  std::string note;
};
GraphSupport cudnn_graph_support(const SdpaGraph& g, const std::string& device_json);
// Whether this build has cuDNN (CMake found it); without, no graph runs.
bool cudnn_in_build();
// The current device's description for cudnn_graph_support (throws mtron::Error where cuDNN
// cannot give it: a build without cuDNN, cuDNN before 9.8).
std::string cudnn_device_json();

// The bf16 ops through cuDNN (tensors of uint16_t: bf16 bits, lse fp32, layouts of
// kernels/attention.h): false, with nothing run, where the shape asks for mtron's own kernels
// (AttnShape::own_kernels) or cuDNN does not take the shape or the addresses (16-byte aligned),
// and the caller runs its own kernels.
bool attention_forward_cudnn(cudaStream_t st,
                             uint16_t* out,
                             float* lse,
                             const uint16_t* q,
                             const uint16_t* k,
                             const uint16_t* v,
                             const AttnShape& s,
                             const AttnMask& m);
bool attention_backward_cudnn(cudaStream_t st,
                              uint16_t* dq,
                              uint16_t* dk,
                              uint16_t* dv,
                              const uint16_t* dout,
                              const uint16_t* q,
                              const uint16_t* k,
                              const uint16_t* v,
                              const uint16_t* out,
                              const float* lse,
                              const AttnShape& s,
                              const AttnMask& m);

}  // namespace mtron::kernels::cuda
