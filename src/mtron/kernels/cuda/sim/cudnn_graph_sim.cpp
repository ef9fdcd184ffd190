// run_graph (sdpa_graph.h) for the CPU emulation: executes the graph that the GPU build hands to
// cuDNN, operation by operation with plain loops, as cuDNN's backend API defines them: virtual
// tensors are materialised (fp32 storage, values rounded to their element type), tensors in
// memory read and written through their dims and strides (bf16 ones as bf16 bits), reshapes are
// views of their input's storage, products accumulate in double. So CI checks each graph's
// operations, broadcasts, transposes and layouts against the CPU's attention without a GPU.
#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "mtron/core/dtype.h"
#include "mtron/core/error.h"
#include "mtron/kernels/cuda/sdpa_graph.h"

namespace mtron::kernels::cuda {
namespace {

// Where a tensor's elements live: bound memory (bf16 bits or fp32) or a materialised buffer.
struct Storage {
  void* ptr = nullptr;
  bool bf16_bits = false;
  std::vector<float> owned;
};

float round_to(GType t, double x) {
  switch (t) {
    case GType::kBf16:
      return bf16_to_float(float_to_bf16(float(x)));
    case GType::kBool:
      return x != 0 ? 1.0f : 0.0f;
    default:
      return float(x);
  }
}

class Executor {
 public:
  Executor(const SdpaGraph& g, const std::vector<Binding>& mem) : g_(g), store_(g.tensors.size()) {
    std::unordered_map<int64_t, const void*> at;
    for (const Binding& b : mem) at[b.uid] = b.ptr;
    for (size_t i = 0; i < g.tensors.size(); ++i) {
      const GTensor& t = g.tensors[i];
      Storage& s = store_[i];
      if (t.by_value) {
        s.owned.assign(1, t.value);
      } else if (!t.is_virtual) {
        MT_ASSERT(at.count(t.uid), str("run_graph: no memory bound to tensor uid ", t.uid));
        sim::check_device_pointer("cudnn graph", at[t.uid]);
        s.ptr = const_cast<void*>(at[t.uid]);
        s.bf16_bits = t.type == GType::kBf16;
        MT_ASSERT(t.type == GType::kBf16 || t.type == GType::kFloat,
                  "run_graph: tensors in memory are bf16 or fp32");
      }
    }
    view_.resize(g.tensors.size());
    for (size_t i = 0; i < g.tensors.size(); ++i) view_[i] = int(i);
  }

  void run() {
    for (const GOp& op : g_.ops) {
      switch (op.kind) {
        case GOpKind::kReshape:
          view_[size_t(op.out)] = view_[size_t(op.in[0])];  // the input's storage
          break;
        case GOpKind::kPointwise:
          materialise(op.out), pointwise(op);
          break;
        case GOpKind::kMatmul:
          materialise(op.out), matmul(op);
          break;
        case GOpKind::kReduction:
          materialise(op.out), reduce(op);
          break;
      }
    }
  }

 private:
  const SdpaGraph& g_;
  std::vector<Storage> store_;
  std::vector<int> view_;  // tensor -> the tensor whose storage holds its elements

  const GTensor& T(int t) const { return g_.tensors[size_t(t)]; }
  static int64_t numel(const GTensor& t) { return t.dim[0] * t.dim[1] * t.dim[2] * t.dim[3]; }

  // A virtual output gets a buffer its strides fit in.
  void materialise(int t) {
    const GTensor& x = T(t);
    if (!x.is_virtual) return;
    int64_t last = 0;
    for (int n = 0; n < 4; ++n) last += (x.dim[n] - 1) * x.stride[n];
    store_[size_t(t)].owned.assign(size_t(last + 1), 0.0f);
  }
  // Offset of element i[] of t, an operand of an operation whose shape is `full`: a dim of
  // extent 1 is broadcast, one of extent n < N serves indices i n / N.
  static int64_t offset(const GTensor& t, const int64_t (&i)[4], const int64_t (&full)[4]) {
    int64_t o = 0;
    for (int n = 0; n < 4; ++n)
      o += (t.dim[n] == full[n] ? i[n] : i[n] * t.dim[n] / full[n]) * t.stride[n];
    return o;
  }
  float get(int t, int64_t off) const {
    const Storage& s = store_[size_t(view_[size_t(t)])];
    float x;
    if (s.ptr)
      x = s.bf16_bits ? bf16_to_float(static_cast<const bf16*>(s.ptr)[off])
                      : static_cast<const float*>(s.ptr)[off];
    else
      x = s.owned[size_t(s.owned.size() == 1 ? 0 : off)];
    return round_to(T(t).type, x);  // a view of another element type reads rounded
  }
  void set(int t, int64_t off, double x) {
    Storage& s = store_[size_t(t)];
    const float v = round_to(T(t).type, x);
    if (!s.ptr)
      s.owned[size_t(off)] = v;
    else if (s.bf16_bits)
      static_cast<bf16*>(s.ptr)[off] = float_to_bf16(v);
    else
      static_cast<float*>(s.ptr)[off] = v;
  }
  // f(i) for every index of shape d.
  template <typename F>
  static void each(const int64_t (&d)[4], F f) {
    int64_t i[4];
    for (i[0] = 0; i[0] < d[0]; ++i[0])
      for (i[1] = 0; i[1] < d[1]; ++i[1])
        for (i[2] = 0; i[2] < d[2]; ++i[2])
          for (i[3] = 0; i[3] < d[3]; ++i[3]) f(i);
  }

  void pointwise(const GOp& op) {
    const GTensor& y = T(op.out);
    each(y.dim, [&](const int64_t(&i)[4]) {
      const auto in = [&](int k) { return double(get(op.in[k], offset(T(op.in[k]), i, y.dim))); };
      double r = 0;
      switch (op.mode) {
        case GMode::kAdd:
          r = in(0) + in(1);
          break;
        case GMode::kSub:
          r = in(0) - in(1);
          break;
        case GMode::kMul:
          r = in(0) * in(1);
          break;
        case GMode::kDiv:
          r = in(0) / in(1);
          break;
        case GMode::kExp:
          r = std::exp(in(0));
          break;
        case GMode::kLog:
          r = std::log(in(0));
          break;
        case GMode::kIdentity:
          r = in(0);
          break;
        case GMode::kGenIndex:
          r = double(i[op.axis]);
          break;
        case GMode::kCmpGe:
          r = in(0) >= in(1) ? 1 : 0;
          break;
        case GMode::kBinarySelect:
          r = in(2) != 0 ? in(0) : in(1);
          break;
        default:
          MT_ASSERT(false, "run_graph: not a pointwise mode");
      }
      set(op.out, offset(y, i, y.dim), r);
    });
  }

  void matmul(const GOp& op) {
    const GTensor &a = T(op.in[0]), &b = T(op.in[1]), &c = T(op.out);
    const int64_t K = a.dim[3];
    MT_ASSERT(b.dim[2] == K && a.dim[2] == c.dim[2] && b.dim[3] == c.dim[3],
              "run_graph: matmul shapes");
    each(c.dim, [&](const int64_t(&i)[4]) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t ia[4] = {i[0], i[1], i[2], k}, ib[4] = {i[0], i[1], k, i[3]};
        const int64_t fa[4] = {c.dim[0], c.dim[1], a.dim[2], K};
        const int64_t fb[4] = {c.dim[0], c.dim[1], K, b.dim[3]};
        acc += double(get(op.in[0], offset(a, ia, fa))) * double(get(op.in[1], offset(b, ib, fb)));
      }
      set(op.out, offset(c, i, c.dim), acc);
    });
  }

  // Over the input's indices, each into the output element it reduces onto.
  void reduce(const GOp& op) {
    const GTensor &x = T(op.in[0]), &y = T(op.out);
    const bool is_max = op.mode == GMode::kMax;
    MT_ASSERT(is_max || op.mode == GMode::kSum, "run_graph: not a reduction mode");
    std::vector<double> acc(size_t(numel(y)), is_max ? -INFINITY : 0.0);
    auto flat = [&](const int64_t(&i)[4]) {  // the output element of input index i
      int64_t f = 0;
      for (int n = 0; n < 4; ++n) f = f * y.dim[n] + i[n] * y.dim[n] / x.dim[n];
      return size_t(f);
    };
    each(x.dim, [&](const int64_t(&i)[4]) {
      const double v = get(op.in[0], offset(x, i, x.dim));
      double& a = acc[flat(i)];
      a = is_max ? std::fmax(a, v) : a + v;
    });
    each(y.dim, [&](const int64_t(&i)[4]) {
      int64_t f = 0;
      for (int n = 0; n < 4; ++n) f = f * y.dim[n] + i[n];
      set(op.out, offset(y, i, y.dim), acc[size_t(f)]);
    });
  }
};

}  // namespace

bool run_graph(cudaStream_t, const SdpaGraph& g, const std::vector<Binding>& mem) {
  ++work().launches;  // cuDNN runs a graph as one fused kernel
  const sim::DeviceAccess access;
  Executor(g, mem).run();
  return true;
}

}  // namespace mtron::kernels::cuda
