#include "mtron/train/run_log.h"

#include "mtron/core/log.h"

namespace mtron::train {

RunLog::RunLog(const TrainArgs& a, int64_t world_size, bool resumed) {
  const std::string path = metrics_path(a);
  if (!path.empty()) metrics_ = std::make_unique<MetricsWriter>(path, resumed);
  if (!a.tensorboard.dir.empty())
    tensorboard_ = std::make_unique<TensorBoard>(a.tensorboard, world_size, a.device);
}

void RunLog::step(const TensorBoardStep& s) {
  if (tensorboard_) tensorboard_->iteration(s);
}

void RunLog::interval(const IterationLog& l) {
  log_plain(format_iteration_line(l));
  if (metrics_) metrics_->write(l);
  if (tensorboard_) tensorboard_->timers(l.iteration, l.elapsed_ms / 1e3, l.tflops_per_device);
}

void RunLog::validation(const std::string& where,
                        int64_t iteration,
                        int64_t consumed,
                        double loss) {
  log_plain(format_eval_block(where, loss));
  if (metrics_) metrics_->write_eval(iteration, loss);
  if (tensorboard_) tensorboard_->validation(iteration, consumed, loss);
}

}  // namespace mtron::train
