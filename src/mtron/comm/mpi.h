// defines: MpiOptions, MpiRuntime
//
// The Open MPI backend of Comm. MpiRuntime is the process's MPI session: MPI_Init_thread at
// construction, MPI_Finalize at destruction (every Comm it made should be gone by then), the
// world Comm, the node-local rank, the collective watchdog and the fatal-error vote that the
// launcher (parallel/launch.h) uses to print an error once and end the whole job.
//
// Thread level: MPI_THREAD_FUNNELED. Only the main thread communicates (non-blocking collectives
// included, as Megatron's overlap does from its one Python thread); OpenMP threads and the
// watchdog thread never call MPI. FUNNELED avoids the locking Open MPI adds for THREAD_MULTIPLE.
//
// Types: fp32, fp64, int32, int64, uint8, uint16 use MPI's predefined types and operations. bf16
// moves as MPI_UINT16_T and reduces with user-defined operations (see ReduceOp in comm.h for the
// rounding). Counts above MpiOptions::max_count (default INT_MAX, since MPI counts are int) are
// split into several calls; all_gather and reduce_scatter then go through a bounded staging
// buffer, and their non-blocking forms complete before returning (no overlap above INT_MAX).
//
// Errors: MPI calls return error codes (MPI_ERRORS_RETURN), which become mtron::InternalError
// naming the call and MPI's message; a recv of a different length than expected is one too.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "mtron/comm/comm.h"
#include "mtron/comm/watchdog.h"

namespace mtron {

struct MpiOptions {
  // Largest element count of one MPI call. Tests lower it to exercise the chunked paths.
  int64_t max_count = INT_MAX;
};

namespace detail {
struct MpiShared;
}

class MpiRuntime {
 public:
  // Initialises MPI. Throws mtron::Error if MPI was already initialised in this process.
  MpiRuntime(int* argc, char*** argv, const MpiOptions& opts = {});
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among the ranks on this node
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  int thread_level() const { return thread_level_; }  // MPI_THREAD_* provided

  // A new Comm over a private duplicate of MPI_COMM_WORLD, named "world". Collective.
  std::unique_ptr<Comm> world();

  // The watchdog every Comm of this runtime reports to (off until set_timeout).
  Watchdog& watchdog();

  // Fatal-error agreement. A rank that caught an error calls this; it waits up to grace_s for
  // every rank to call it too (on a communicator of its own, so pending user collectives do not
  // interfere). all_ranks is true when every rank arrived and all passed the same message hash;
  // code is then the largest code passed. Otherwise (some rank is elsewhere) the rank is alone.
  struct ErrorVote {
    bool all_ranks = false;
    bool same_message = false;
    int code = 0;
  };
  ErrorVote vote_on_error(uint64_t message_hash, int code, double grace_s);

  // Ends every rank of the job with this exit code (MPI_Abort on MPI_COMM_WORLD).
  [[noreturn]] void abort(int code);

 private:
  std::shared_ptr<detail::MpiShared> shared_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int thread_level_ = 0;
  std::string host_;
};

}  // namespace mtron
