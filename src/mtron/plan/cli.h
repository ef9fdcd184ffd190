// defines: plan_main, doctor_main
//
// The `mtron plan` and `mtron doctor` commands (apps/mtron.cpp dispatches to them). argv[0] is
// the command name. Return the process exit code: 0 success, 1 doctor found problems, 2 a user
// error (printed as one line).
#pragma once

namespace mtron::plan {

int plan_main(int argc, char** argv);
int doctor_main(int argc, char** argv);

}  // namespace mtron::plan
