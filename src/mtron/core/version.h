// defines: mtron_version
#pragma once

namespace mtron {

// The project version (CMakeLists.txt's project(VERSION)), e.g. "0.1.0".
const char* mtron_version();

}  // namespace mtron
