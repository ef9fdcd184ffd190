// defines: SingleComm, make_single_comm
//
// The group of one: collectives are identities (out-of-place ones copy); send/recv to self is
// an error (a schedule that needs it has a bug).
#pragma once

#include <memory>

#include "mtron/comm/comm.h"

namespace mtron {

std::unique_ptr<Comm> make_single_comm();

}  // namespace mtron
