// defines: prepare_environment
#pragma once

namespace mtron::app {

// Puts into the environment what libraries read when they are loaded, before main, and starts
// the program again (once, with the same arguments) if anything had to be set. Returns the exit
// status to end with (2: a bad MTRON_CPU_ISA, already reported) or -1 to go on.
int prepare_environment(char** argv);

}  // namespace mtron::app
