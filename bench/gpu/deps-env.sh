# bench/gpu/deps-env.sh: sourced by bench/gpu/run.sh. `deps_setup DIR` unpacks the Debian
# packages that bench/gpu/pack-deps.sh collected (DIR/deps.tar.xz) into a private prefix (never
# into /) and sets, for the commands that build and run mtron there:
#   DEPS_ENV        environment assignments for `env` (loader path, pkg-config path, Open MPI
#                   prefix), applied only to mtron's commands, so PyTorch keeps its own libraries
#   DEPS_CMAKE_ARGS CMake cache settings that point find_package and FindMPI at the prefix
# Debian's files assume they live in /usr: absolute symlinks are redirected into the prefix,
# the pkg-config files are rewritten, and Open MPI is relocated with OPAL_PREFIX.

deps_setup() {
  local src=$1 P=${2:-/tmp/mtron-deps}
  rm -rf "$P"
  mkdir -p "$P"
  # tar needs the xz program for .xz; Python's tarfile reads it without
  if command -v xz >/dev/null; then
    tar -xJf "$src/deps.tar.xz" -C "$P" || return 1
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$src/deps.tar.xz" "$P" || return 1
  fi
  local l t
  while IFS= read -r l; do
    t=$(readlink "$l")
    case $t in /*) ln -sfn "$P$t" "$l" ;; esac
  done < <(find "$P" -type l)
  find "$P" -name '*.pc' -exec sed -i "s#/usr#$P/usr#g" {} +
  local lib=$P/usr/lib/x86_64-linux-gnu
  DEPS_ENV=(
    "OPAL_PREFIX=$P/usr"
    "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    "PKG_CONFIG_PATH=$lib/openblas-openmp/pkgconfig:$lib/pkgconfig:$P/usr/share/pkgconfig"
    "LD_LIBRARY_PATH=$lib/openblas-openmp:$lib:$P/lib/x86_64-linux-gnu:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "PATH=$P/usr/bin:$PATH"
  )
  DEPS_CMAKE_ARGS=(
    "-DCMAKE_PREFIX_PATH=$P/usr"
    "-DMPI_C_COMPILER=$P/usr/bin/mpicc.openmpi"
    "-DMPI_CXX_COMPILER=$P/usr/bin/mpicxx.openmpi"
    "-DMPIEXEC_EXECUTABLE=$P/usr/bin/orterun"
  )
}
