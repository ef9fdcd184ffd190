#include "mtron/core/error.h"

namespace mtron::detail {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(str("internal error at ", file, ":", line, ": (", cond, ") ", msg,
                          " -- this is a bug in mtron, please report it"));
}

}  // namespace mtron::detail
