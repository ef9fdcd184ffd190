// defines: lower, trim, parse_timestamp (helpers the log parser and the detectors share)
//
// Internal to plan/doctor.cpp and plan/doctor_io.cpp.
#pragma once

#include <string>

namespace mtron::plan::doctor_detail {

std::string lower(std::string s);
std::string trim(const std::string& s);
// "2024-05-01 12:00:00" or "2024-05-01T12:00:00" (optionally with .ffffff) anywhere in the
// line -> seconds (as UTC; only differences matter); -1 when the line has none.
double parse_timestamp(const std::string& s);

}  // namespace mtron::plan::doctor_detail
