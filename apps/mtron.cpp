// mtron: one binary, one subcommand per job (README.md lists them).
#include <cstdio>
#include <cstring>
#include <string>

#include "environment.h"
#include "mtron/checkpoint/hf.h"
#include "mtron/core/version.h"
#include "mtron/data/preprocess.h"
#include "mtron/kernels/cpu_isa.h"
#include "mtron/plan/cli.h"
#include "mtron/train/generate.h"
#include "mtron/train/trainer.h"

namespace {
void usage(FILE* f) {
  std::fputs(
      "usage: mtron <command> [flags]\n"
      "\n"
      "commands:\n"
      "  train       pretrain a GPT/Llama model (Megatron's flags; mpirun -np N for parallel)\n"
      "  preprocess  JSONL/text -> Megatron .bin/.idx token files\n"
      "  generate    sample text from a checkpoint\n"
      "  export      checkpoint -> Hugging Face folder\n"
      "  import      Hugging Face folder -> checkpoint\n"
      "  plan        choose a parallel layout: memory, time, MFU, launch scripts\n"
      "  doctor      diagnose a training log\n"
      "\n"
      "mtron <command> --help shows the command's flags; mtron --version the version and the\n"
      "CPU paths it takes (MTRON_CPU_ISA caps them: see docs/kernels.md).\n",
      f);
}
}  // namespace

int main(int argc, char** argv) {
  if (const int status = mtron::app::prepare_environment(argv); status >= 0) return status;
  if (argc == 2 && !std::strcmp(argv[1], "--version")) {
    std::printf("mtron %s: %s\n", mtron::mtron_version(), mtron::kernels::cpu_summary().c_str());
    return 0;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "train") return mtron::train::train_main(argc - 1, argv + 1);
  if (cmd == "preprocess") return mtron::data::preprocess_main(argc - 1, argv + 1);
  if (cmd == "generate") return mtron::train::generate_main(argc - 1, argv + 1);
  if (cmd == "export") return mtron::checkpoint::export_main(argc - 1, argv + 1);
  if (cmd == "import") return mtron::checkpoint::import_main(argc - 1, argv + 1);
  if (cmd == "plan") return mtron::plan::plan_main(argc - 1, argv + 1);
  if (cmd == "doctor") return mtron::plan::doctor_main(argc - 1, argv + 1);
  std::fprintf(stderr, "mtron: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
