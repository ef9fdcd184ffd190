# Cross-compiling for aarch64 Linux on a Debian 12 x86-64 host (scripts/cross-aarch64.sh prepares
# everything named here, and is the way to use this file):
# - the compilers of Debian's g++-aarch64-linux-gnu;
# - the arm64 multiarch libraries (dpkg --add-architecture arm64), in /usr/lib/aarch64-linux-gnu;
# - the overlay: the arm64 packages that cannot be installed beside their amd64 variants (Open MPI,
#   sentencepiece, the oneDNN headers) unpacked into a directory whose layout mirrors /, by default
#   build/aarch64-overlay (environment variable MTRON_AARCH64_OVERLAY);
# - qemu-aarch64 (Debian qemu-user) as CMAKE_CROSSCOMPILING_EMULATOR, so that ctest and
#   gtest_discover_tests run the test binaries. Its -L makes the emulated program see the overlay
#   on top of / (a file there takes precedence over the same path on the host), so the binaries
#   load the overlay's libraries, and Open MPI its plugins, from their usual paths.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

if(DEFINED ENV{MTRON_AARCH64_OVERLAY})
  set(_overlay "$ENV{MTRON_AARCH64_OVERLAY}")
else()
  set(_overlay "${CMAKE_CURRENT_LIST_DIR}/../build/aarch64-overlay")
endif()
get_filename_component(MTRON_AARCH64_OVERLAY "${_overlay}" ABSOLUTE)
set(_lib "${MTRON_AARCH64_OVERLAY}/usr/lib/aarch64-linux-gnu")

# Packages are looked up in the overlay first, then on the host; programs (mpiexec, python3) are
# the host's.
set(CMAKE_FIND_ROOT_PATH "${MTRON_AARCH64_OVERLAY}" /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR}
    "${_lib}/pkgconfig:/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# The overlay's libraries depend on each other (libmpi on libopen-rte, ...): the linker finds
# them there.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_lib}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_lib}")

# Open MPI's compiler wrappers (mpicxx) are the host's, so FindMPI is given the arm64 library and
# headers instead of asking them (the C API: mtron does not use the MPI C++ bindings).
set(MPI_CXX_LIB_NAMES mpi)
set(MPI_mpi_LIBRARY "${_lib}/openmpi/lib/libmpi.so")
set(MPI_CXX_INCLUDE_PATH "${_lib}/openmpi/include")
set(MPI_CXX_SKIP_MPICXX ON)

# -Wpsabi notes, at every call that passes a std::pair<double, double>, that GCC 10.1 changed how
# aarch64 passes it: a concern only when linking code from GCC 9 and older, which mtron does not.
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")

# qemu-user does not implement process_vm_readv, the single-copy transport of Open MPI's
# shared-memory BTL: -E makes the emulated ranks copy through shared memory instead. Without -cpu
# qemu emulates its "max" CPU (SVE2, 512-bit vectors); the environment variable QEMU_CPU chooses
# another (e.g. max,sve-default-vector-length=16: 128-bit SVE2 like Neoverse V2 / Grace).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L "${MTRON_AARCH64_OVERLAY}"
    -E OMPI_MCA_btl_vader_single_copy_mechanism=none)
