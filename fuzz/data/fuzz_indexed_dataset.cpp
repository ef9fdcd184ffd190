// Fuzzes the readers of untrusted data files: the Megatron .idx/.bin pair (IndexedDataset, then
// reading every sequence and building GPT indices over it) and the .npy index cache (load_npy).
// Input: one mode byte, then for mode 0 the .idx bytes, "\n====\n", the .bin bytes; for mode 1
// the .npy bytes. A rejected file must be an mtron::Error; anything else (a crash, a sanitizer
// report, another exception) is a finding.
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "mtron/core/error.h"
#include "mtron/data/gpt_dataset.h"
#include "mtron/data/indexed_dataset.h"
#include "mtron/data/int_array.h"

using namespace mtron::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static fuzz::FuzzFiles files;
  fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.byte() % 2;
  try {
    if (mode == 0) {
      const auto idx = in.part();
      const auto bin = in.part();
      files.write("d.idx", idx);
      files.write("d.bin", bin);
      auto ds = std::make_shared<IndexedDataset>(files.path("d"));
      std::vector<int32_t> buf;
      for (int64_t i = 0; i < ds->num_sequences(); ++i) {
        buf.resize(std::size_t(ds->sequence_length(i)));
        ds->read(i, 0, ds->sequence_length(i), buf.data());
      }
      if (ds->num_sequences() > 0 && ds->num_tokens() < 100000) {
        GPTDataset g(ds, 0, ds->num_sequences(), 8, Split::kTrain, {4, 1, "", false});
        std::vector<int32_t> s(std::size_t(g.sample_length()));
        for (int64_t k = 0; k < g.size(); ++k) g.get(k, s.data());
      }
    } else {
      files.write("a.npy", in.rest());
      IntArray a = load_npy(files.path("a.npy"));
      uint64_t sum = 0;  // touch every element
      for (int64_t i = 0; i < a.size(); ++i) sum += uint64_t(a[i]);
      (void)sum;
    }
  } catch (const mtron::Error&) {
  }
  return 0;
}
