// run_graph (sdpa_graph.h) through cuDNN's backend API: each tensor and operation of the graph
// becomes one backend descriptor, the operation graph goes to cuDNN's heuristics (mode A), and
// the first engine configuration that finalises into an execution plan runs it. Plans are made
// once per distinct graph and device and cached (a training step makes no descriptor or
// heuristic calls after its first); a graph that no engine takes is remembered as such, warned
// about once with cuDNN's own message, and left to mtron's kernels.
#include <cudnn.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/log.h"
#include "mtron/kernels/cuda/sdpa_graph.h"

namespace mtron::kernels::cuda {
namespace {

std::string cudnn_message(cudnnStatus_t st) {
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof last);
  return str(cudnnGetErrorString(st), last[0] ? str(": ", last) : std::string());
}

// A descriptor that cannot be made or finalised: the graph is not one cuDNN runs.
struct Unsupported {
  std::string what;
};

// A backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename V>
  void set(cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type,
           const V* v,
           int64_t n = 1) {
    check(cudnnBackendSetAttribute(d_, name, type, n, v), str("setting attribute ", int(name)));
  }
  void ref(cudnnBackendAttributeName_t name, const Desc& other) {
    const cudnnBackendDescriptor_t o = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &o);
  }
  void finalize() { check(cudnnBackendFinalize(d_), "cudnnBackendFinalize"); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  static void check(cudnnStatus_t st, const std::string& what) {
    if (st != CUDNN_STATUS_SUCCESS) throw Unsupported{str(what, ": ", cudnn_message(st))};
  }
};

cudnnDataType_t data_type(GType t) {
  switch (t) {
    case GType::kBf16:
      return CUDNN_DATA_BFLOAT16;
    case GType::kInt32:
      return CUDNN_DATA_INT32;
    case GType::kBool:
      return CUDNN_DATA_BOOLEAN;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

cudnnPointwiseMode_t pointwise_mode(GMode m) {
  switch (m) {
    case GMode::kAdd:
      return CUDNN_POINTWISE_ADD;
    case GMode::kSub:
      return CUDNN_POINTWISE_SUB;
    case GMode::kMul:
      return CUDNN_POINTWISE_MUL;
    case GMode::kDiv:
      return CUDNN_POINTWISE_DIV;
    case GMode::kExp:
      return CUDNN_POINTWISE_EXP;
    case GMode::kLog:
      return CUDNN_POINTWISE_LOG;
    case GMode::kGenIndex:
      return CUDNN_POINTWISE_GEN_INDEX;
    case GMode::kCmpGe:
      return CUDNN_POINTWISE_CMP_GE;
    case GMode::kBinarySelect:
      return CUDNN_POINTWISE_BINARY_SELECT;
    default:
      return CUDNN_POINTWISE_IDENTITY;
  }
}

struct Plan {
  std::vector<Desc> keep;  // every descriptor the plan refers to, kept alive with it
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  bool usable = false;
};

// The operation descriptor of op, its tensors' descriptors at t.
Desc operation(const GOp& op, const std::vector<Desc>& t, std::vector<Desc>& keep) {
  const float one = 1.0f;
  const cudnnDataType_t compute = data_type(op.compute);
  switch (op.kind) {
    case GOpKind::kPointwise: {
      Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
      const cudnnPointwiseMode_t mode = pointwise_mode(op.mode);
      pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
      pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &compute);
      if (op.mode == GMode::kGenIndex)
        pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &op.axis);
      pw.finalize();
      Desc d(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
      d.ref(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
      d.ref(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t[size_t(op.in[0])]);
      if (op.in[1] >= 0) d.ref(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t[size_t(op.in[1])]);
      if (op.in[2] >= 0) d.ref(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t[size_t(op.in[2])]);
      d.ref(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t[size_t(op.out)]);
      d.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, &one);
      d.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, &one);
      d.finalize();
      keep.push_back(std::move(pw));
      return d;
    }
    case GOpKind::kMatmul: {
      Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
      mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute);
      mm.finalize();
      Desc d(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
      d.ref(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t[size_t(op.in[0])]);
      d.ref(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t[size_t(op.in[1])]);
      d.ref(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t[size_t(op.out)]);
      d.ref(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
      d.finalize();
      keep.push_back(std::move(mm));
      return d;
    }
    case GOpKind::kReduction: {
      Desc red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
      const cudnnReduceTensorOp_t r =
          op.mode == GMode::kMax ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
      red.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute);
      red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &r);
      red.finalize();
      Desc d(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
      d.ref(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t[size_t(op.in[0])]);
      d.ref(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t[size_t(op.out)]);
      d.ref(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red);
      d.finalize();
      keep.push_back(std::move(red));
      return d;
    }
    case GOpKind::kReshape:
      break;
  }
  Desc d(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  d.ref(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t[size_t(op.in[0])]);
  d.ref(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t[size_t(op.out)]);
  d.finalize();
  return d;
}

// The plan of g: its descriptors, the operation graph, the heuristics' engine configurations in
// their order of preference, the first that finalises. Throws Unsupported.
void build(cudnnHandle_t handle, const SdpaGraph& g, Plan& p) {
  std::vector<Desc> t;
  for (const GTensor& x : g.tensors) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const cudnnDataType_t type = data_type(x.type);
    const int64_t align = 16;
    const bool is_virtual = x.is_virtual, by_value = x.by_value;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type);
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, x.dim, 4);
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, x.stride, 4);
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &x.uid);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
    d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual);
    if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value);
    d.finalize();
    t.push_back(std::move(d));
  }
  std::vector<cudnnBackendDescriptor_t> ops;
  std::vector<Desc> op_descs;
  for (const GOp& op : g.ops) {
    op_descs.push_back(operation(op, t, p.keep));
    ops.push_back(op_descs.back().get());
  }
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
            int64_t(ops.size()));
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle);
  graph.finalize();

  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.ref(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  heur.finalize();
  int64_t n = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr);
  if (st != CUDNN_STATUS_SUCCESS || n == 0)
    throw Unsupported{str("the heuristics found no engine (", cudnn_message(st), ")")};
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < n; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, raw.data());
  if (st != CUDNN_STATUS_SUCCESS) throw Unsupported{str("engine configs: ", cudnn_message(st))};
  std::string why;
  for (int64_t i = 0; i < n && !p.usable; ++i) {
    try {
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle);
      plan.ref(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[size_t(i)]);
      plan.finalize();
      int64_t count = 0;
      st = cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                    CUDNN_TYPE_INT64, 1, &count, &p.workspace);
      if (st != CUDNN_STATUS_SUCCESS) throw Unsupported{cudnn_message(st)};
      p.plan = plan.get();
      p.keep.push_back(std::move(plan));
      p.usable = true;
    } catch (const Unsupported& u) {
      why = u.what;
    }
  }
  if (!p.usable) throw Unsupported{str("none of ", n, " engine configs finalised (", why, ")")};
  for (auto* v : {&t, &op_descs, &cfgs})
    for (Desc& d : *v) p.keep.push_back(std::move(d));
  p.keep.push_back(std::move(graph));
  p.keep.push_back(std::move(heur));
}

// cuDNN handles and plans of the process. Deliberately never destroyed: at exit the CUDA runtime
// may already be unloaded, and freeing into it fails.
class Library {
 public:
  static Library& get() {
    static Library* lib = new Library;
    return *lib;
  }
  struct Ready {
    cudnnHandle_t handle;
    const Plan* plan;
  };
  Ready prepare(const SdpaGraph& g) {
    int device = 0;
    MT_CUDA_CHECK(cudaGetDevice(&device));
    const std::lock_guard<std::mutex> lock(mu_);
    cudnnHandle_t& h = handles_[device];
    if (!h) {
      const cudnnStatus_t st = cudnnCreate(&h);
      MT_ASSERT(st == CUDNN_STATUS_SUCCESS, str("cudnnCreate: ", cudnn_message(st)));
    }
    std::unique_ptr<Plan>& p = plans_[str(device, ':', g.key())];
    if (!p) {
      p = std::make_unique<Plan>();
      try {
        build(h, g, *p);
      } catch (const Unsupported& u) {
        p->usable = false;
        log_warn("cuDNN does not run this attention graph ({}): mtron's attention kernels run it",
                 u.what);
      }
    }
    return {h, p.get()};
  }

 private:
  std::mutex mu_;
  std::unordered_map<int, cudnnHandle_t> handles_;
  std::unordered_map<std::string, std::unique_ptr<Plan>> plans_;
};

}  // namespace

bool run_graph(cudaStream_t st, const SdpaGraph& g, const std::vector<Binding>& mem) {
  const Library::Ready r = Library::get().prepare(g);
  if (!r.plan->usable) return false;
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  std::vector<float> values;
  values.reserve(g.tensors.size());  // ptrs point into it
  for (const GTensor& t : g.tensors) {
    if (!t.by_value) continue;
    values.push_back(t.value);
    uids.push_back(t.uid);
    ptrs.push_back(&values.back());
  }
  for (const Binding& b : mem) {
    uids.push_back(b.uid);
    ptrs.push_back(const_cast<void*>(b.ptr));
  }
  Scratch ws(size_t(r.plan->workspace), st);
  void* ws_ptr = ws.as<void>();
  try {
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(),
             int64_t(uids.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(),
             int64_t(ptrs.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws_ptr);
    pack.finalize();
    cudnnStatus_t s = cudnnSetStream(r.handle, st);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(r.handle, r.plan->plan, pack.get());
    MT_ASSERT(s == CUDNN_STATUS_SUCCESS, str("cudnnBackendExecute: ", cudnn_message(s)));
  } catch (const Unsupported& u) {
    MT_ASSERT(false, str("cuDNN variant pack: ", u.what));
  }
  ++work().launches;  // cuDNN runs the graph as one fused kernel
  check_launch("cudnn_sdpa", st);
  return true;
}

}  // namespace mtron::kernels::cuda
