// `mtron train`: parse, check what can be checked before any compute, then train.
#include <omp.h>

#include <algorithm>
#include <cstdlib>

#include "mtron/core/formulas.h"
#include "mtron/core/log.h"
#include "mtron/parallel/launch.h"
#include "mtron/parallel/rank_map.h"
#include "mtron/train/run_log.h"
#include "mtron/train/trainer.h"

namespace mtron::train {
namespace {

// Which layers each pipeline stage (and virtual stage) holds, for --print-layout.
std::string stage_layers(const TrainArgs& a) {
  const int64_t P = a.parallel.pp(), v = a.parallel.vpp();
  std::string out = "\nstage  layers\n";
  for (int64_t s = 0; s < P; ++s) {
    out += fmt::format("{:5d} ", s);
    for (int64_t c = 0; c < v; ++c) {
      const int64_t vs = c * P + s;
      const ParallelConfig::StageLayers l = a.parallel.virtual_stage_layers(vs);
      out += fmt::format(" {}{}{}{}",
                         l.num_layers > 0
                             ? fmt::format("[{}, {})", l.first_layer, l.first_layer + l.num_layers)
                             : "(no layers)",
                         vs == 0 ? " +embedding" : "",
                         vs == P * v - 1 && a.model.mtp_num_layers > 0
                             ? fmt::format(" +{} MTP", a.model.mtp_num_layers)
                             : "",
                         vs == P * v - 1 ? " +output layer and loss" : "");
    }
    out += "\n";
  }
  return out;
}

// --print-layout: the layout, the schedule and Megatron's memory estimate, from the flags only.
std::string layout_report(const TrainArgs& a) {
  std::string s = format_layout(a.parallel) + stage_layers(a);
  s += fmt::format("\nmodel: {}\nlayout: {}\n", a.model.summary(), a.parallel.summary());
  if (a.recompute.granularity != RecomputeGranularity::kNone)
    s += fmt::format("activation recompute: {}\n", a.recompute.describe());
  if (a.muon) s += fmt::format("optimizer: {}\n", optimizer_summary(a));
  s += fmt::format("global batch size: {}; {} iterations", a.batches.describe(), a.train_iters);
  if (a.eval_global_batch_size != a.parallel.global_batch_size)
    s += fmt::format("; validation batch {}", a.eval_global_batch_size);
  s += "\n";
  s += format_theoretical_memory(
      megatron_theoretical_memory(a.model, a.parallel, a.recompute.granularity));
  for (const std::string& n : a.notes) s += "\nnote: " + n;
  return s;
}

}  // namespace

int train_main(int argc, char** argv) {
  return run_main(argc, argv, [&](Launch& launch) {
    log_init(launch.rank(), launch.size());
    // One OpenMP team per rank, the node's cores split between its ranks.
    if (!std::getenv("OMP_NUM_THREADS")) {
      omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, launch.local_size())));
    }
    TrainArgs a;
    if (!parse_train_args(argc, argv, launch.size(), a)) return 0;
    if (a.print_layout) {
      if (launch.rank() == 0) log_plain(layout_report(a));
      return 0;
    }
    launch.set_collective_timeout(a.distributed_timeout_minutes * 60.0);
    // Every rank: nodes may see --save differently, and a save that fails after hours of
    // compute loses them.
    if (!a.checkpoint.save.empty()) checkpoint::check_save_dir(a.checkpoint.save, launch.rank());
    Trainer t(a, launch.world(), launch.local_size());
    t.run();
    return 0;
  });
}

}  // namespace mtron::train
