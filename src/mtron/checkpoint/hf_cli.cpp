// `mtron export` and `mtron import`: thin command-line layers over hf.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "mtron/checkpoint/hf.h"
#include "mtron/core/error.h"
#include "mtron/core/log.h"
#include "mtron/parallel/launch.h"

namespace mtron::checkpoint {

namespace {

// Parses argv into app; returns false after printing --help.
bool parse(CLI::App& app, int argc, char** argv) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::ParseError& e) {
    throw Error(e.what());
  }
  return true;
}

}  // namespace

int export_main(int argc, char** argv) {
  return run_main(argc, argv, [&](Launch& launch) {
    log_init(launch.rank(), launch.size());
    MT_CHECK(launch.size() == 1, "mtron export runs as one process (not under mpirun)");
    CLI::App app{
        "mtron export: checkpoint -> Hugging Face folder (GPT2LMHeadModel, LlamaForCausalLM or "
        "MixtralForCausalLM)"};
    app.name("mtron export");
    std::string load, output, shard = "5GB";
    HfExportOptions o;
    app.add_option("--load", load, "Checkpoint (a --save directory or an iter_* directory)")
        ->required();
    app.add_option("--output", output, "Folder to write (must not exist, or be empty)")->required();
    app.add_option("--dtype", o.dtype, "float32 (default) or bfloat16");
    app.add_option("--max-shard-size", shard, "Split model.safetensors above this (default 5GB)");
    if (!parse(app, argc, argv)) return 0;
    o.max_shard_bytes = parse_byte_size(shard);
    export_hf(load, output, o);
    return 0;
  });
}

int import_main(int argc, char** argv) {
  return run_main(argc, argv, [&](Launch& launch) {
    log_init(launch.rank(), launch.size());
    MT_CHECK(launch.size() == 1, "mtron import runs as one process (not under mpirun)");
    CLI::App app{"mtron import: Hugging Face folder -> checkpoint that `mtron train --load` reads"};
    app.name("mtron import");
    std::string input, output;
    HfImportOptions o;
    app.add_option("--input", input, "Hugging Face folder (config.json, model.safetensors)")
        ->required();
    app.add_option("--output", output, "Checkpoint directory to write (a --save directory)")
        ->required();
    app.add_option("--make-vocab-size-divisible-by", o.make_vocab_size_divisible_by,
                   "Pad the vocabulary to a multiple of this (default 128)");
    app.add_option("--seq-length", o.seq_length,
                   "Sequence length recorded (default: max_position_embeddings)");
    if (!parse(app, argc, argv)) return 0;
    import_hf(input, output, o);
    return 0;
  });
}

}  // namespace mtron::checkpoint
