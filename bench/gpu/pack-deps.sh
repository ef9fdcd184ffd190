#!/usr/bin/env bash
# bench/gpu/pack-deps.sh: run HERE (Debian 12, where scripts/install-deps.sh has run), before
# calling the device tool. Collects the Debian packages mtron's build needs beyond a compiler
# and CUDA (oneDNN, OpenBLAS, Open MPI, fmt, CLI11, nlohmann-json, pcre2, sentencepiece, zstd,
# zlib, google-benchmark, OpenCL headers) with their runtime libraries into .gpudeps/ in the repo
# root (ignored by git, .gitignore), so that bench/gpu/run.sh can build on a GPU
# machine whose image has none of them and no network: it unpacks them with dpkg -x into a
# private prefix (never into /) and points CMake, pkg-config, Open MPI and the loader there.
#
# The .deb files come from apt's cache when present, else `apt-get download` (no install).
# About 30 MiB; the device tool carries at most 64 MiB with the working tree. Then:
#   run(command="bash bench/gpu/run.sh", carry=[".gpudeps"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(
  # build: headers, CMake configs, pkg-config files
  libdnnl-dev libopenblas-openmp-dev libopenmpi-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libpcre2-dev libsentencepiece-dev libzstd-dev zlib1g-dev libbenchmark-dev
  ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
  # the libraries they link (the base system's libc, libstdc++, libgomp are assumed present)
  libdnnl2 ocl-icd-libopencl1 libopenblas0-openmp libgfortran5 libquadmath0 libfmt9
  libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libsentencepiece0 libzstd1 zlib1g
  libbenchmark1debian
  # Open MPI 4.1 and what its plugins load; openmpi-bin has orted/orterun (singleton start)
  libopenmpi3 openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libpmix2 libucx0 libibverbs1 ibverbs-providers librdmacm1 libfabric1
  libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 libmunge2
)

out=.gpudeps
mkdir -p "$out"
rm -f "$out"/*.deb
missing=()
for p in "${packages[@]}"; do
  # the cached .deb of the installed version, if apt kept it
  v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null | sed 's/^[0-9]*://') || v=""
  f=$(ls /var/cache/apt/archives/"${p}_${v}"_*.deb 2>/dev/null | head -1 || true)
  if [ -n "$v" ] && [ -n "$f" ]; then
    cp "$f" "$out/"
  else
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "pack-deps: downloading ${#missing[@]} packages: ${missing[*]}"
  (cd "$out" && apt-get download -qq "${missing[@]}")
fi
n=$(ls "$out"/*.deb | wc -l)
echo "pack-deps: $n packages, $(du -sm "$out" | cut -f1) MiB in $out/"
[ "$n" -eq "${#packages[@]}" ] || { echo "pack-deps: expected ${#packages[@]} packages" >&2; exit 1; }
echo 'next: run(command="bash bench/gpu/run.sh", carry=[".gpudeps"], timeout_s=600)'
