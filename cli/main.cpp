// The `kiln` command: train, generate, eval and bench. Errors (kiln::Error) are printed as
// one clear message and exit with status 2; they never abort.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include "cli/commands.h"
#include "cli/train.h"
#include "kiln/core/error.h"
#include "kiln/dist/dist.h"

namespace {

const char* kUsage = R"(usage: kiln COMMAND [flags]   (kiln COMMAND --help lists a command's flags)

  kiln train mnist   [--model convnet|lenet|mlp] [--data DIR]   train on MNIST / Fashion-MNIST IDX files
  kiln train cifar10 --data DIR [--model resnet20|convnet]      train on CIFAR-10 binary batches
  kiln train gpt     --text FILE                                train a character-level GPT
  kiln generate      --checkpoint F [--prompt S]                sample text from a GPT checkpoint
  kiln eval          --checkpoint F                             test accuracy / validation loss
  kiln bench         [--workloads ...] [--devices cpu,cuda]     time the reference workloads

common training flags: --device cpu|cuda|auto --epochs N --batch-size N --lr X --threads N
  --amp bf16|fp16 --accum N --checkpoint-activations --seed N --save F --resume F --log FILE
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  // Under mpirun: an error on one rank ends every rank with its message (never a hang).
  auto fail = [&](const char* what) {
    if (kiln::dist::world_size() > 1) kiln::dist::abort("kiln " + cmd + ": " + what);
    std::fprintf(stderr, "kiln %s: error: %s\n", cmd.c_str(), what);
    return 2;
  };
  try {
    kiln::dist::init();  // joins the job when started by mpirun; a no-op otherwise
    kiln::cli::setup_logging("");
    if (cmd == "train") return kiln::cli::cmd_train(argc, argv, 2);
    if (cmd == "generate") return kiln::cli::cmd_generate(argc, argv, 2);
    if (cmd == "eval") return kiln::cli::cmd_eval(argc, argv, 2);
    if (cmd == "bench") return kiln::cli::cmd_bench(argc, argv, 2);
    std::fprintf(stderr, "kiln: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {  // kiln::Error and the rest
    return fail(e.what());
  }
}
