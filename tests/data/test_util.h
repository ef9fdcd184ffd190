// defines: TempDir, run_command, python_reference, repo_path, write_text
//
// Helpers shared by the data tests: temporary folders, running a command and capturing its
// output, and calling the independent Python reference (megatron_reference.py, run with
// Debian's /usr/bin/python3, which has numpy).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace mtron::data::testing {

inline std::string repo_path(const std::string& rel) {
  return std::string(MTRON_SOURCE_DIR) + "/" + rel;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mtron-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct CommandResult {
  int status;
  std::string out;
};

// Runs `cmd` with /bin/sh; captures stdout (stderr passes through).
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r{-1, {}};
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 1 << 16> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs megatron_reference.py <cmd> <args>; returns its JSON output (null if none).
inline nlohmann::json python_reference(const std::string& cmd, const nlohmann::json& args) {
  const std::string script = repo_path("tests/data/megatron_reference.py");
  // Arguments can be large: pass them in a file.
  TempDir t;
  const std::string argfile = t / "args.json";
  std::ofstream(argfile) << args.dump();
  const auto r = run_command("/usr/bin/python3 " + shell_quote(script) + " " + cmd + " " +
                             shell_quote("@" + argfile));
  EXPECT_EQ(r.status, 0) << "python reference " << cmd << " failed";
  if (r.out.empty()) return nullptr;
  return nlohmann::json::parse(r.out);
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace mtron::data::testing
