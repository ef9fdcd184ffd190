// defines: ExitSignalHandler
//
// --exit-signal-handler: while an ExitSignalHandler lives, SIGTERM and SIGINT no longer kill
// the process; they are recorded, and the training loop asks received() once per iteration
// (all ranks then agree by an all-reduce, save and exit 0: checkpointer.h). The previous
// handlers come back on destruction. At most one instance at a time (signal dispositions are
// process-wide).
#pragma once

namespace mtron::checkpoint {

class ExitSignalHandler {
 public:
  ExitSignalHandler();
  ~ExitSignalHandler();
  ExitSignalHandler(const ExitSignalHandler&) = delete;
  ExitSignalHandler& operator=(const ExitSignalHandler&) = delete;

  // The first signal received (SIGTERM or SIGINT), or 0.
  int received() const;
};

}  // namespace mtron::checkpoint
