#include "mtron/core/version.h"

namespace mtron {

const char* mtron_version() {
  return MTRON_VERSION;
}

}  // namespace mtron
