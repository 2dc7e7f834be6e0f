// The subcommands of the `kiln` command. Each takes the whole argv and the index of its
// first own argument, returns the process exit code, and throws kiln::Error on bad input.
#pragma once

namespace kiln::cli {

int cmd_train(int argc, char** argv, int first);     // kiln train mnist|cifar10|gpt ...
int cmd_generate(int argc, char** argv, int first);  // kiln generate --checkpoint F --prompt S
int cmd_eval(int argc, char** argv, int first);      // kiln eval --checkpoint F ...
int cmd_bench(int argc, char** argv, int first);     // kiln bench --workloads ... (cli/cmd_bench.cpp)

}  // namespace kiln::cli
