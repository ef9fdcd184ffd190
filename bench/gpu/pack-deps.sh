#!/usr/bin/env bash
# bench/gpu/pack-deps.sh [BUILD_DIR]: run HERE (Debian 12, where scripts/install-deps.sh has run),
# before calling the device tool. Writes into .gpudeps/ in the repo root (ignored by git):
#
#   deps.tar.xz  the Debian packages mtron's build and programs need beyond a compiler and CUDA
#                (oneDNN, OpenBLAS, Open MPI, fmt, CLI11, nlohmann-json, pcre2, sentencepiece,
#                Highway, ICU, zstd, zlib, google-benchmark, OpenCL headers) with their runtime
#                libraries, unpacked and without documentation or unused static libraries, so
#                that bench/gpu/run.sh can build and run on a GPU machine whose image has none of
#                them and no network: deps-env.sh unpacks the archive into a private prefix
#                (never into /) and points CMake, pkg-config, Open MPI and the loader there.
#   bin.tar.xz   with BUILD_DIR (a cuda-release build of HEAD, e.g. build/cuda-gpu configured as
#                run.sh does): mtron, op_check, gpu_bench, nccl_check and cudnn_check, stripped, and
#   bin.commit   the commit they were built from. run.sh then runs these (when they load there)
#                instead of spending device time on a build; a tree with uncommitted changes is
#                refused, so the binaries are the commit that RESULTS.md names.
#
# The .deb files come from apt's cache when present, else `apt-get download` (no install). The
# device tool carries at most 64 MiB with the working tree; this writes about 30. Then:
#   run(command="bash bench/gpu/run.sh", carry=[".gpudeps"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-}
programs="apps/mtron bench/gpu/op_check bench/gpu/gpu_bench bench/gpu/nccl_check bench/gpu/cudnn_check"

packages=(
  # build: headers, CMake configs, pkg-config files
  libdnnl-dev libopenblas-openmp-dev libopenmpi-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libpcre2-dev libsentencepiece-dev libzstd-dev zlib1g-dev libbenchmark-dev libhwy-dev libicu-dev
  ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
  # the libraries they link (the base system's libc and libstdc++ are assumed present)
  libgomp1 libdnnl2 ocl-icd-libopencl1 libopenblas0-openmp libgfortran5 libquadmath0 libfmt9
  libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libsentencepiece0 libzstd1 zlib1g
  libbenchmark1debian libhwy1 libicu72 libudev1
  # Open MPI 4.1 and what its plugins load; openmpi-bin has orted/orterun (singleton start)
  libopenmpi3 openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libpmix2 libucx0 libibverbs1 ibverbs-providers librdmacm1 libfabric1
  libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 libmunge2
)

if [ -n "$build" ]; then
  for f in $programs; do
    [ -x "$build/$f" ] || { echo "pack-deps: $build/$f is missing (build it first)" >&2; exit 1; }
  done
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "pack-deps: the tree has uncommitted changes: commit, rebuild $build, then pack" >&2
    exit 1
  fi
fi

out=.gpudeps
tmp=$(mktemp -d /tmp/pack-deps.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out" "$tmp/debs" "$tmp/root"
rm -f "$out"/*.deb "$out"/deps.tar.xz "$out"/bin.tar.xz "$out"/bin.commit
missing=()
for p in "${packages[@]}"; do
  # the cached .deb of the installed version, if apt kept it
  v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null | sed 's/^[0-9]*://') || v=""
  f=$(ls /var/cache/apt/archives/"${p}_${v}"_*.deb 2>/dev/null | head -1 || true)
  if [ -n "$v" ] && [ -n "$f" ]; then
    cp "$f" "$tmp/debs/"
  else
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "pack-deps: downloading ${#missing[@]} packages: ${missing[*]}"
  # apt's sandbox user must be able to write there
  chmod 755 "$tmp" && chmod 777 "$tmp/debs"
  (cd "$tmp/debs" && apt-get download -qq "${missing[@]}")
fi
n=$(ls "$tmp"/debs/*.deb | wc -l)
[ "$n" -eq "${#packages[@]}" ] || { echo "pack-deps: expected ${#packages[@]} packages, got $n" >&2; exit 1; }
for f in "$tmp"/debs/*.deb; do dpkg -x "$f" "$tmp/root"; done
# What neither the build nor the programs read: documentation, translations, and the static
# libraries (mtron links the shared ones; CMake's benchmark config names libbenchmark_main.a, so
# it stays).
rm -rf "$tmp"/root/usr/share/{doc,man,locale,lintian,info}
find "$tmp/root" -name '*.a' ! -name 'libbenchmark_main.a' -delete
tar -cf - -C "$tmp/root" . | xz -T0 >"$out/deps.tar.xz"
echo "pack-deps: $n packages, $(du -m "$out/deps.tar.xz" | cut -f1) MiB in $out/deps.tar.xz"

if [ -n "$build" ]; then
  mkdir -p "$tmp/bin/apps" "$tmp/bin/bench/gpu"
  for f in $programs; do
    strip -o "$tmp/bin/$f" "$build/$f"
  done
  # xz's 64 MiB dictionary at -9 spans the five programs, which share most of their code
  tar -cf - -C "$tmp/bin" . | xz -9 -T0 >"$out/bin.tar.xz"
  git rev-parse --short HEAD >"$out/bin.commit"
  echo "pack-deps: the programs of $build ($(cat "$out/bin.commit")), $(du -m "$out/bin.tar.xz" | cut -f1) MiB in $out/bin.tar.xz"
fi
echo "pack-deps: $(du -sm "$out" | cut -f1) MiB in $out/"
echo 'next: run(command="bash bench/gpu/run.sh", carry=[".gpudeps"], timeout_s=600)'
