// defines: Launcher, detect_launcher, Launch, run_main, init_rank_device
//
// How mtron starts as one process or as N: `mtron train` alone runs the single-process backend
// (MPI is never initialised); `mpirun -np N mtron train` and `srun --mpi=pmix mtron train`
// initialise MPI and run the MPI backend. docs/parallelism.md says which launch lines work with
// Debian's Open MPI and why.
//
// run_main wraps a command's main so that a fatal error on any rank ends the whole job, never
// a hang: the error prints once as "[mtron rR/W] error: <message>" and every rank exits with 2
// for mtron::Error (the user's mistake) or 1 for anything else (a bug, out of memory). When all
// ranks hit the same error (a bad flag, a layout that fails validation) only rank 0 prints it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "mtron/comm/comm.h"
#include "mtron/comm/mpi.h"
#include "mtron/core/dtype.h"

namespace mtron {

enum class Launcher {
  kNone,    // no launcher: one process, single backend
  kMpirun,  // Open MPI's mpirun/mpiexec (OMPI_COMM_WORLD_* set)
  kPmix,    // a PMIx launcher: srun --mpi=pmix, prterun (PMIX_RANK set)
};
std::string_view launcher_name(Launcher l);

// Which launcher started this process, from its environment (getenv is injectable for tests).
// Throws mtron::Error, with the supported alternatives, for launches this build cannot serve:
// srun tasks without PMIx (plain srun, or --mpi=pmi2: Debian's Open MPI has no PMI-1/PMI-2
// client) would otherwise each train alone as rank 0 of 1.
Launcher detect_launcher(const std::function<const char*(const char*)>& getenv);

// The process's distributed environment: launcher, MPI session (when launched), world Comm.
class Launch {
 public:
  Launch(int* argc, char*** argv, const MpiOptions& mpi = {});
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  Launcher launcher() const { return launcher_; }
  Comm& world() { return *world_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among this node's processes
  int local_size() const { return local_size_; }
  std::string describe() const;  // "mpirun, 8 ranks, 8 on this node (host)"

  // Collective watchdog (watchdog.h): a blocking call or Request::wait that waits longer than
  // this ends the job with a message naming the operation and group. <= 0 turns it off.
  // Default: 600 s, Megatron's --distributed-timeout-minutes 10.
  void set_collective_timeout(double seconds);

  // Ends the job for an error this rank caught. Single process: prints and returns code. MPI:
  // waits up to grace_s for the other ranks to report an error too (then rank 0 alone prints
  // when all messages agree), prints, and aborts every rank with the code: never returns.
  int fail(int code, const std::string& message, double grace_s = 2.0);

 private:
  Launcher launcher_ = Launcher::kNone;
  std::unique_ptr<MpiRuntime> mpi_;
  std::unique_ptr<Comm> world_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_;
};

// Runs body(launch) and returns its exit code; catches every exception and ends the job as
// Launch::fail describes.
int run_main(int argc,
             char** argv,
             const std::function<int(Launch&)>& body,
             const MpiOptions& mpi = {});

// Readies the device this rank computes on (`what` names the flag in errors). The CPU needs
// nothing. CUDA: one GPU per rank, the node-local rank's (ranks are placed by node, in blocks
// of ranks_per_node), initialised; with several ranks the parallel groups communicate device
// buffers, so this returns an NCCL Comm bootstrapped over `world` on `stream` for them (the
// world itself, for host scalars such as the loss and the gradient norm, stays on the
// launcher's Comm). Returns null when the groups use `world`.
std::unique_ptr<Comm> init_rank_device(
    Device d, Comm& world, int ranks_per_node, void* stream, const char* what = "--device cuda");

}  // namespace mtron
