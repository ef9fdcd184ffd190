// defines: Error, InternalError, str(), MT_CHECK, MT_ASSERT
//
// Two kinds of failure, as c10 separates them:
// - MT_CHECK: the user's input is wrong (a flag, a file, a shape). Throws mtron::Error whose
//   what() is one line meant for the user; apps print it and exit 2 (no stack trace).
// - MT_ASSERT: an internal invariant broke (a bug). Always on; throws InternalError carrying
//   file:line so the report points at the code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mtron {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

// Concatenates anything streamable: str("expected ", a, " got ", b).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

namespace detail {
[[noreturn]] void throw_internal(const char* file,
                                 int line,
                                 const char* cond,
                                 const std::string& msg);
}  // namespace detail

}  // namespace mtron

#define MT_CHECK(cond, ...)                                       \
  do {                                                            \
    if (!(cond)) throw ::mtron::Error(::mtron::str(__VA_ARGS__)); \
  } while (0)

#define MT_ASSERT(cond, ...)                                                                 \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::mtron::detail::throw_internal(__FILE__, __LINE__, #cond, ::mtron::str(__VA_ARGS__)); \
  } while (0)
