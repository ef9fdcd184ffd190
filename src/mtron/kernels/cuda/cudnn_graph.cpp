// run_graph (sdpa_graph.h) through cuDNN's backend API: each tensor and operation of the graph
// becomes one backend descriptor, the operation graph goes to cuDNN's heuristics (mode A), and
// the first engine configuration that finalises into an execution plan runs it. Plans are made
// once per distinct graph and device and cached (a training step makes no descriptor or
// heuristic calls after its first); a graph that no engine takes is remembered as such, warned
// about once with cuDNN's own message, and left to mtron's kernels.
#include <cudnn.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
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
  // Its workspace did not fit once: mtron's kernels run the graph from then on (no allocation is
  // tried again on each call, and the warning is given once).
  std::atomic<bool> no_room{false};
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

// What plans are made for: the current device (its handle), or a GPU described by cuDNN's device
// properties (deviceless: the heuristics and the kernels' compilation need no GPU).
struct Target {
  cudnnHandle_t handle = nullptr;
  const Desc* device = nullptr;
};

// g's tensor and operation descriptors, kept in `keep`, and its operation graph.
Desc describe(const SdpaGraph& g, const Target& target, std::vector<Desc>& keep) {
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
  for (const GOp& op : g.ops) {
    Desc d = operation(op, t, keep);
    ops.push_back(d.get());
    keep.push_back(std::move(d));
  }
  for (Desc& d : t) keep.push_back(std::move(d));
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
            int64_t(ops.size()));
  if (target.handle) graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &target.handle);
  graph.finalize();
  return graph;
}

// The engine configurations cuDNN's heuristics (mode A) offer for `graph` that can run on the
// target, in their order of preference; *found: how many the heuristics found before dropping
// those that cannot.
std::vector<Desc> engine_configs(const Desc& graph, const Target& target, int64_t* found) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.ref(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (target.device) heur.ref(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *target.device);
  heur.finalize();
  int64_t n = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr);
  if (st != CUDNN_STATUS_SUCCESS) throw Unsupported{str("heuristics: ", cudnn_message(st))};
  *found = n;
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < n; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, raw.data());
  if (st != CUDNN_STATUS_SUCCESS) throw Unsupported{str("engine configs: ", cudnn_message(st))};
  while (int64_t(cfgs.size()) > n) cfgs.pop_back();  // keep the viable ones
  return cfgs;
}

// The global index of cfg's engine (cuDNN's number for the kernel family), or -1.
int64_t engine_index(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0, index = -1;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                               &index) != CUDNN_STATUS_SUCCESS)
    return -1;
  return index;
}

// The execution plan of engine configuration cfg (its workspace in *workspace). Throws
// Unsupported.
Desc make_plan(const Desc& cfg, const Target& target, int64_t* workspace) {
  Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  if (target.handle) plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &target.handle);
  if (target.device) plan.ref(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, *target.device);
  plan.ref(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  plan.finalize();
  int64_t count = 0;
  const cudnnStatus_t st = cudnnBackendGetAttribute(
      plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count, workspace);
  if (st != CUDNN_STATUS_SUCCESS) throw Unsupported{str("workspace: ", cudnn_message(st))};
  return plan;
}

// The plan of g on the current device: the first engine configuration, in the heuristics' order,
// that finalises. Throws Unsupported.
void build(cudnnHandle_t handle, const SdpaGraph& g, Plan& p) {
  const Target target{handle, nullptr};
  Desc graph = describe(g, target, p.keep);
  int64_t found = 0;
  std::vector<Desc> cfgs = engine_configs(graph, target, &found);
  std::string why = str("the heuristics found ", found, " engines, none that runs here");
  for (size_t i = 0; i < cfgs.size() && !p.usable; ++i) {
    try {
      Desc plan = make_plan(cfgs[i], target, &p.workspace);
      p.plan = plan.get();
      p.keep.push_back(std::move(plan));
      p.usable = true;
    } catch (const Unsupported& u) {
      why = str("none of ", cfgs.size(), " engine configs finalised: ", u.what);
    }
  }
  if (!p.usable) throw Unsupported{why};
  for (Desc& d : cfgs) p.keep.push_back(std::move(d));
  p.keep.push_back(std::move(graph));
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
    Plan* plan;
  };
  // The current device's handle.
  cudnnHandle_t handle() {
    const std::lock_guard<std::mutex> lock(mu_);
    return handle_locked();
  }
  Ready prepare(const SdpaGraph& g) {
    const std::lock_guard<std::mutex> lock(mu_);
    const cudnnHandle_t h = handle_locked();
    std::unique_ptr<Plan>& p = plans_[device_][g.key];
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
  int device_ = 0;  // handle_locked's device
  std::unordered_map<int, cudnnHandle_t> handles_;

  cudnnHandle_t handle_locked() {
    MT_CUDA_CHECK(cudaGetDevice(&device_));
    cudnnHandle_t& h = handles_[device_];
    if (!h) {
      const cudnnStatus_t st = cudnnCreate(&h);
      MT_ASSERT(st == CUDNN_STATUS_SUCCESS, str("cudnnCreate: ", cudnn_message(st)));
    }
    return h;
  }
  std::unordered_map<int, std::unordered_map<std::string, std::unique_ptr<Plan>>> plans_;
};

}  // namespace

bool run_graph(cudaStream_t st, const SdpaGraph& g, const std::vector<Binding>& mem) {
  const Library::Ready r = Library::get().prepare(g);
  if (!r.plan->usable || r.plan->no_room.load(std::memory_order_relaxed)) return false;
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
  for (const GTensor& t : g.tensors) {
    if (!t.accumulated || cudnnGetVersion() >= 90600) continue;
    size_t bytes = sizeof(float);
    for (int64_t d : t.dim) bytes *= size_t(d);
    for (const Binding& b : mem)
      if (b.uid == t.uid) MT_CUDA_CHECK(cudaMemsetAsync(const_cast<void*>(b.ptr), 0, bytes, st));
  }
  // The workspace, cuDNN's choice (for attention it may grow with the scores, B H Sq Sk), may not
  // fit beside the model: mtron's kernels, which need none, run the graph then and from then on.
  std::optional<Scratch> ws;
  try {
    ws.emplace(size_t(r.plan->workspace), st);
  } catch (const Error& e) {
    if (!r.plan->no_room.exchange(true))
      log_warn(
          "cuDNN's fused attention needs {:.2f} GiB of workspace here ({}): mtron's attention "
          "kernels run it from now on (the deterministic backward's workspace grows with batch x "
          "heads x sequence^2; NVTE_ALLOW_NONDETERMINISTIC_ALGO=1 lets cuDNN accumulate dq "
          "atomically instead)",
          double(r.plan->workspace) / double(int64_t(1) << 30), e.what());
    return false;
  }
  void* ws_ptr = ws->as<void>();
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

GraphSupport cudnn_graph_support(const SdpaGraph& g, const std::string& device_json) {
  GraphSupport r;
  try {
    std::vector<Desc> keep;
    Target target;
    std::unique_ptr<Desc> device;
    if (device_json.empty()) {
      target.handle = Library::get().handle();
    } else {
      device = std::make_unique<Desc>(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
      device->set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, device_json.data(),
                  int64_t(device_json.size()));
      device->finalize();
      target.device = device.get();
    }
    const Desc graph = describe(g, target, keep);
    const std::vector<Desc> cfgs = engine_configs(graph, target, &r.engines);
    r.viable = int64_t(cfgs.size());
    for (const Desc& c : cfgs) r.engine_ids.push_back(engine_index(c));
    if (cfgs.empty()) {
      r.note = "no engine configuration can run it";
      return r;
    }
    // the first configuration's plan, as run_graph would try it first
    try {
      make_plan(cfgs[0], target, &r.workspace);
      r.planned = r.compiled = true;
      r.note = str("planned, workspace ", r.workspace, " bytes");
    } catch (const Unsupported& u) {
      // deviceless, cuDNN compiles the kernels and then fails to load them (no driver)
      r.compiled = target.device &&
                   u.what.find("CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER") != std::string::npos;
      r.note = r.compiled ? "compiled (loading the kernels needs the GPU)" : str("plan: ", u.what);
    }
  } catch (const Unsupported& u) {
    r.note = u.what;
  }
  return r;
}

bool cudnn_in_build() {
  return true;
}

std::string cudnn_device_json() {
  Desc device(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  int device_id = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device_id));
  const int32_t id = device_id;
  try {
    device.set(CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, &id);
    device.finalize();
  } catch (const Unsupported& u) {
    MT_CHECK(false, "cuDNN's device properties: ", u.what);
  }
  int64_t n = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(
      device.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, nullptr);
  std::string json(size_t(n), '\0');
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendGetAttribute(device.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                  CUDNN_TYPE_CHAR, n, &n, json.data());
  MT_CHECK(st == CUDNN_STATUS_SUCCESS, "cuDNN's device properties: ", cudnn_message(st));
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return json;
}

}  // namespace mtron::kernels::cuda
