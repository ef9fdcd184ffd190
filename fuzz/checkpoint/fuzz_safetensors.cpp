// Fuzzes the parsers of untrusted checkpoint metadata: a safetensors file (the header parser on
// the bytes in memory, then the file reader reading every tensor) and a checkpoint manifest.
// Input: one mode byte, then the file's bytes (mode 0: safetensors, 1: manifest.json). A
// rejected input must be an mtron::Error; anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstdint>
#include <span>
#include <vector>

#include "../data/fuzz_util.h"
#include "mtron/checkpoint/crc32c.h"
#include "mtron/checkpoint/manifest.h"
#include "mtron/checkpoint/safetensors.h"
#include "mtron/core/error.h"

using namespace mtron::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static mtron::data::fuzz::FuzzFiles files;
  mtron::data::fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.byte() % 2;
  const std::string_view rest = in.rest();
  try {
    if (mode == 0) {
      const auto* p = reinterpret_cast<const uint8_t*>(rest.data());
      const SafetensorsHeader h = parse_safetensors_header({p, rest.size()}, rest.size(), "m");
      uint32_t c = 0;  // touch every tensor's bytes
      for (const SafetensorsEntry& e : h.entries) {
        c = crc32c(p + h.data_start + e.begin, e.end - e.begin, c);
      }
      SafetensorsFile f(files.write("m.safetensors", rest));
      std::vector<char> buf;
      for (const SafetensorsEntry& e : f.header().entries) {
        buf.resize(e.end - e.begin);
        f.read(e, 0, buf.size(), buf.data());
      }
    } else {
      const Manifest m = manifest_from_json(rest, "manifest.json");
      (void)manifest_to_json(m);
    }
  } catch (const mtron::Error&) {
  }
  return 0;
}
