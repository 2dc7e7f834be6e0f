// Normal(0, 1) floats for tests that draw millions (the GEMM tests' operands): drawn once
// into a pool, then read in order from a start that depends on the seed. Drawing each value
// from std::normal_distribution cost a quarter of test_sgemm_bf16's time under the ASan
// build (clang -O1: libstdc++'s generate_canonical takes two long-double logs per call).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace kiln::test {

class NormalPool {
 public:
  explicit NormalPool(uint64_t seed) : i_(size_t((seed * 0x9E3779B97F4A7C15ull) >> 40)) {}
  float operator()() { return pool()[i_++ % kSize]; }

 private:
  static constexpr size_t kSize = (1 << 16) + 1;  // odd: a matrix's rows do not repeat its period
  static const std::vector<float>& pool() {
    static const std::vector<float> p = [] {
      std::mt19937 g(20261207);
      std::normal_distribution<float> nd;
      std::vector<float> v(kSize);
      for (float& x : v) x = nd(g);
      return v;
    }();
    return p;
  }
  size_t i_;
};

}  // namespace kiln::test
