// defines: kLine, split_range, max_threads, threads_for, FnRef, parallel_run, parallel_ranges,
// parallel_rows:
//          how the CPU kernels split work over OpenMP threads
//
// Independent of the SIMD target, so that every target splits a call the same way. The OpenMP
// regions live in parallel.cpp, compiled without SIMD target attributes, and the kernels pass
// their loop bodies as callables: clang (14 at least) outlines a `#pragma omp parallel` region
// into a function without the enclosing function's target attributes, and then fails in the
// back end on the AVX-512 vectors of a kernel compiled for the AVX3 target ("Do not know how to
// split the result of this operator"). A body costs one indirect call per row or per share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace mtron::kernels::cpu {

constexpr int64_t kLine = 16;  // floats per 64-byte cache line

// The contiguous share [begin, end) of n items for thread `t` of `nt`, in units of `align`
// items (so vector loops see whole cache lines except in the last share).
inline void split_range(int64_t n, int t, int nt, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / nt, rem = units % nt;
  const int64_t u0 = t * per + std::min<int64_t>(t, rem);
  const int64_t u1 = u0 + per + (t < rem ? 1 : 0);
  *begin = std::min(n, u0 * align);
  *end = std::min(n, u1 * align);
}

// The OpenMP threads a parallel region gets at most (omp_get_max_threads).
int max_threads();

// Threads worth using for `bytes` of streaming work: one thread per ~256 KB, so small calls do
// not pay the OpenMP fork/join (a few microseconds) for nothing.
int threads_for(int64_t bytes);

// A non-owning reference to a callable, valid while the callable lives (a function argument).
template <class Sig>
class FnRef;

template <class R, class... A>
class FnRef<R(A...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FnRef>>>
  FnRef(F&& f)  // NOLINT(google-explicit-constructor): a parameter type, like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, A... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// fn(t, nt) once for every worker t in [0, nt), on up to nt OpenMP threads (fewer only when
// OpenMP grants fewer, e.g. inside another parallel region; a thread then runs several workers
// one after the other). Results that depend on the worker index therefore depend on nt only.
void parallel_run(int nt, FnRef<void(int t, int nt)> fn);

// fn(begin, end) for each of nt workers' contiguous shares of [0, n) (split_range in units of
// `align`), skipping empty shares.
void parallel_ranges(int64_t n, int nt, int64_t align, FnRef<void(int64_t begin, int64_t end)> fn);

// fn(i) for every i in [0, n), the rows split statically over nt workers.
void parallel_rows(int64_t n, int nt, FnRef<void(int64_t i)> fn);

}  // namespace mtron::kernels::cpu
