// Helpers of the `kiln train` tests: tiny generated MNIST-like data, and running the
// command's entry points in-process with a vector of arguments.
#pragma once
#include <cstring>
#include <string>
#include <vector>
#include "cli/commands.h"
#include "cli/run_state.h"
#include "cli/train.h"
#include "data/data_test_util.h"
#include "kiln/monitor/metrics.h"
#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/serialize.h"

using namespace kiln;
using namespace kiln::cli;
using namespace kiln::monitor;
using kiln::test::error_of;
using kiln_test::idx_bytes;
using kiln_test::TempDir;

namespace kiln_test {

/// n 28x28 images: class c is a bright 6x6 square at a class-dependent place, plus noise.
inline void write_tiny_mnist(const std::string& dir, const std::string& prefix, uint32_t n, uint64_t seed) {
  data::Rng rng(seed);
  std::vector<uint8_t> px(size_t(n) * 784), lab(n);
  for (uint32_t i = 0; i < n; ++i) {
    const int c = int(rng.below(10));
    lab[i] = uint8_t(c);
    for (int p = 0; p < 784; ++p) px[i * 784 + p] = uint8_t(rng.below(60));
    const int r0 = 2 + (c / 5) * 12, c0 = 2 + (c % 5) * 5;
    for (int r = r0; r < r0 + 6; ++r)
      for (int q = c0; q < c0 + 4; ++q) px[i * 784 + r * 28 + q] = 250;
  }
  kiln_test::write_bytes(dir + "/" + prefix + "-images-idx3-ubyte", idx_bytes(0x803, {n, 28, 28}, px));
  kiln_test::write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte", idx_bytes(0x801, {n}, lab));
}

inline TrainResult train(std::vector<std::string> args) {
  args.insert(args.begin(), {"kiln", "train"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return run_training(parse_train_config(int(argv.size()), argv.data(), 2));
}

inline int command(int (*fn)(int, char**, int), std::vector<std::string> args) {
  args.insert(args.begin(), {"kiln", "cmd"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return fn(int(argv.size()), argv.data(), 2);
}

inline void check_bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i);
    CHECK(std::memcmp(&a[i], &b[i], sizeof(double)) == 0);
  }
}

}  // namespace kiln_test

using namespace kiln_test;
