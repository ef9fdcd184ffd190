// defines: FuzzFiles, FuzzInput
//
// Helpers for the data fuzz targets: a private scratch folder (the readers take paths), and a
// cursor that splits one fuzz input into parts.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace mtron::data::fuzz {

class FuzzFiles {
 public:
  FuzzFiles() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mtron-fuzz-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
  }
  ~FuzzFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string p = dir_ + "/" + name;
    std::FILE* f = std::fopen(p.c_str(), "wb");
    if (f) {
      std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
    return p;
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

// Splits the input at the separator "\n====\n" (parts may be empty).
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, std::size_t size)
      : s_(reinterpret_cast<const char*>(data), size) {}
  uint8_t byte() {
    if (s_.empty()) return 0;
    const uint8_t b = static_cast<uint8_t>(s_[0]);
    s_.remove_prefix(1);
    return b;
  }
  std::string_view part() {
    static constexpr std::string_view kSep = "\n====\n";
    const auto p = s_.find(kSep);
    std::string_view out = s_.substr(0, p);
    s_ = p == std::string_view::npos ? std::string_view() : s_.substr(p + kSep.size());
    return out;
  }
  std::string_view rest() const { return s_; }

 private:
  std::string_view s_;
};

}  // namespace mtron::data::fuzz
