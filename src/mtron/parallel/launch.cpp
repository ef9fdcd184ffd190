#include "mtron/parallel/launch.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <thread>

#include "mtron/comm/nccl.h"
#include "mtron/comm/single.h"
#include "mtron/core/error.h"
#include "mtron/core/log.h"
#include "mtron/kernels/device.h"

namespace mtron {
namespace {

const char* kSrunHint =
    "run `srun --mpi=pmix ...` (Slurm built with PMIx; `srun --mpi=list` shows it), or "
    "`mpirun -np N mtron ...` inside the allocation (sbatch/salloc), which uses the Slurm "
    "allocation by itself";

// FNV-1a: a stable hash of an error message, compared across ranks.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

int env_int(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* v = getenv(name);
  return v && *v ? std::atoi(v) : -1;
}

}  // namespace

std::string_view launcher_name(Launcher l) {
  switch (l) {
    case Launcher::kNone:
      return "none";
    case Launcher::kMpirun:
      return "mpirun";
    case Launcher::kPmix:
      return "pmix";
  }
  MT_ASSERT(false, "unknown launcher");
}

Launcher detect_launcher(const std::function<const char*(const char*)>& getenv) {
  if (getenv("OMPI_COMM_WORLD_SIZE")) return Launcher::kMpirun;
  if (getenv("PMIX_RANK")) return Launcher::kPmix;
  // PMI-1/PMI-2 (srun --mpi=pmi2, MPICH's hydra): Open MPI would start as a singleton.
  const int pmi_size = env_int(getenv, "PMI_SIZE");
  MT_CHECK(pmi_size <= 1, "started by a PMI-1/PMI-2 launcher with ", pmi_size,
           " processes, which this Open MPI cannot join: ", kSrunHint);
  // An srun task sees SLURM_STEP_NUM_TASKS; a batch script (sbatch's shell) does not.
  const int step_tasks = env_int(getenv, "SLURM_STEP_NUM_TASKS");
  MT_CHECK(step_tasks <= 1, "srun started ", step_tasks,
           " tasks without PMIx, so each would train alone as rank 0 of 1: ", kSrunHint);
  return Launcher::kNone;
}

Launch::Launch(int* argc, char*** argv, const MpiOptions& mpi)
    : launcher_(detect_launcher([](const char* n) { return std::getenv(n); })) {
  if (launcher_ == Launcher::kNone) {
    world_ = make_single_comm();
    world_->set_name("world");
    log_init(0, 1);
    return;
  }
  // More ranks on this node than cores (a laptop debugging a cluster layout): Open MPI's
  // receive loops busy-poll and starve the ranks that compute; yielding makes such runs ~3x
  // faster here. It must be set before MPI_Init; an explicit setting wins.
  const int local =
      env_int([](const char* n) { return std::getenv(n); }, "OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local > int(std::thread::hardware_concurrency()) &&
      !std::getenv("OMPI_MCA_mpi_yield_when_idle")) {
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  }
  mpi_ = std::make_unique<MpiRuntime>(argc, argv, mpi);
  rank_ = mpi_->rank();
  size_ = mpi_->size();
  local_rank_ = mpi_->local_rank();
  local_size_ = mpi_->local_size();
  host_ = mpi_->host();
  log_init(rank_, size_);
  // Under srun, MPI must see the same task set as Slurm.
  const int step_tasks =
      env_int([](const char* n) { return std::getenv(n); }, "SLURM_STEP_NUM_TASKS");
  if (launcher_ == Launcher::kPmix && step_tasks > 0) {
    MT_CHECK(step_tasks == size_, "srun started ", step_tasks, " tasks but MPI sees a world of ",
             size_, ": ", kSrunHint);
  }
  world_ = mpi_->world();
  set_collective_timeout(600);
}

Launch::~Launch() {
  world_.reset();  // before MPI_Finalize
  mpi_.reset();
}

std::string Launch::describe() const {
  if (!mpi_) return "no launcher, 1 process (single backend)";
  return fmt::format("{}, {} ranks, {} on this node ({}), MPI thread level {}",
                     launcher_name(launcher_), size_, local_size_, host_, mpi_->thread_level());
}

void Launch::set_collective_timeout(double seconds) {
  if (mpi_) mpi_->watchdog().set_timeout(seconds);
}

int Launch::fail(int code, const std::string& message, double grace_s) {
  if (!mpi_) {
    log_error("{}", message);
    return code;
  }
  const MpiRuntime::ErrorVote vote = mpi_->vote_on_error(fnv1a(message), code, grace_s);
  if (!vote.all_ranks || !vote.same_message || rank_ == 0) log_error("{}", message);
  mpi_->abort(vote.all_ranks ? vote.code : code);
}

int run_main(int argc,
             char** argv,
             const std::function<int(Launch&)>& body,
             const MpiOptions& mpi) {
  std::unique_ptr<Launch> launch;
  int code = 0;
  std::string message;
  try {
    launch = std::make_unique<Launch>(&argc, &argv, mpi);
    return body(*launch);
  } catch (const Error& e) {
    code = 2;
    message = e.what();
  } catch (const std::bad_alloc&) {
    code = 1;
    message = "out of memory (std::bad_alloc)";
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
  }
  if (!launch) {  // failed before the world existed: this process speaks for itself
    log_error("{}", message);
    return code;
  }
  return launch->fail(code, message);
}

std::unique_ptr<Comm> init_rank_device(
    Device d, Comm& world, int ranks_per_node, void* stream, const char* what) {
  if (d == Device::kCPU) return nullptr;
  const int gpus = kernels::device_count(d);
  MT_CHECK(gpus > 0, what, ": ", kernels::device_unavailable(d));
  const int local_rank = world.rank() % std::max(1, ranks_per_node);
  MT_CHECK(local_rank < gpus, what, ": ", ranks_per_node, " ranks on this node but ", gpus,
           " GPU(s) visible (one rank per GPU)");
  kernels::init_device(d, local_rank);
  if (world.size() == 1) return nullptr;
  return make_nccl_comm(world, stream ? stream : kernels::default_stream(d));
}

}  // namespace mtron
