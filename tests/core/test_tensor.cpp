// Tests of the Tensor handle: factories, views sharing storage, dtype conversions
// (float16/bfloat16 rounding), RNG repeatability, printing, memory stats and errors
// (overflowing shapes included).
#include <doctest/doctest.h>
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::T;

TEST_CASE("factories produce the requested shapes and values") {
  Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dtype() == DType::float32);
  CHECK(z.at({1, 2}) == 0.0);
  CHECK(ones({4}, {.dtype = DType::int64}).at({3}) == 1.0);
  CHECK(full({2}, 2.5, {.dtype = DType::float64}).at({1}) == 2.5);
  Tensor a = arange(0, 5);
  CHECK(a.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25).numel() == 4);
  Tensor l = linspace(0, 1, 5);
  CHECK(l.to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1.0f});
  Tensor v = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.dtype() == DType::float64);
  CHECK(v.at({1, 0}) == 4.0);
  float raw[3] = {7, 8, 9};
  Tensor b = from_blob(raw, {3}, DType::float32);
  raw[0] = 0;  // from_blob copies
  CHECK(b.at({0}) == 7.0);
  CHECK(zeros_like(v).dtype() == DType::float64);
  CHECK(ones_like(v).at({0, 0}) == 1.0);
  CHECK(full_like(v, 3).at({1, 1}) == 3.0);
  CHECK(empty_like(v).shape() == v.shape());
  CHECK(scalar_tensor(4).dim() == 0);
  CHECK(scalar_tensor(4).item() == 4.0);
}

TEST_CASE("random factories are repeatable with a seed and have the right statistics") {
  manual_seed(123);
  Tensor a = randn({1000});
  Tensor u = rand({1000});
  manual_seed(123);
  Tensor b = randn({1000});
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  Tensor c = randn({1000});
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  auto va = randn({20000}, {.dtype = DType::float64}).to_vector<double>();
  double m = 0, s = 0;
  for (double x : va) m += x;
  m /= double(va.size());
  for (double x : va) s += (x - m) * (x - m);
  s = std::sqrt(s / double(va.size()));
  CHECK(std::fabs(m) < 0.05);
  CHECK(std::fabs(s - 1.0) < 0.05);
  for (float x : u.to_vector<float>()) CHECK((x >= 0.f && x < 1.f));
  auto ri = randint(3, 7, {500}).to_vector<int64_t>();
  bool seen[4] = {false, false, false, false};
  for (auto x : ri) {
    REQUIRE((x >= 3 && x < 7));
    seen[x - 3] = true;
  }
  CHECK((seen[0] && seen[1] && seen[2] && seen[3]));
  CHECK(randint(0, 2, {3}).dtype() == DType::int64);
  CHECK_THROWS_AS(randint(5, 5, {3}), Error);
  RngState st = get_rng_state();
  Tensor r1 = rand({10});
  set_rng_state(st);
  Tensor r2 = rand({10});
  CHECK(r1.to_vector<float>() == r2.to_vector<float>());
}

TEST_CASE("views share storage: a write through a view is seen by the base") {
  Tensor base = arange(0, 12, 1, {.dtype = DType::float64}).reshape({3, 4});
  Tensor tr = base.transpose(0, 1);
  CHECK(tr.shape() == Shape{4, 3});
  CHECK(!tr.is_contiguous());
  CHECK(tr.storage() == base.storage());
  CHECK(tr.at({3, 2}) == 11.0);
  Tensor row = base.select(0, 1);
  row.fill_(-1);
  CHECK(base.at({1, 0}) == -1.0);
  CHECK(base.at({1, 3}) == -1.0);
  CHECK(base.at({2, 0}) == 8.0);
  Tensor col = base.narrow(1, 2, 2);
  CHECK(col.shape() == Shape{3, 2});
  col.fill_(5);
  CHECK(base.at({0, 2}) == 5.0);
  CHECK(base.at({0, 1}) == 1.0);
  Tensor sl = base.slice(1, 0, 4, 2);
  CHECK(sl.shape() == Shape{3, 2});
  CHECK(sl.at({2, 1}) == 5.0);
  Tensor e = from_vector<float>({1, 2, 3}).unsqueeze(0).expand({4, 3});
  CHECK(e.shape() == Shape{4, 3});
  CHECK(e.strides()[0] == 0);
  CHECK(e.at({3, 2}) == 3.0);
  Tensor p = zeros({2, 3, 4}).permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(zeros({1, 3, 1}).squeeze().shape() == Shape{3});
  CHECK(zeros({1, 3, 1}).squeeze(0).shape() == Shape{3, 1});
  CHECK(zeros({3}).unsqueeze(-1).shape() == Shape{3, 1});
  CHECK(zeros({2, 3, 4}).flatten(1).shape() == Shape{2, 12});
  CHECK(zeros({2, 3, 4}).flatten().shape() == Shape{24});
  CHECK(zeros({2, 3, 4}).view({6, -1}).shape() == Shape{6, 4});
  CHECK(zeros({4, 2}).t().shape() == Shape{2, 4});
  // reshape of a non-contiguous tensor copies; view refuses
  Tensor tt = base.t();
  CHECK_THROWS_AS(tt.view({12}), Error);
  Tensor flat = tt.reshape({12});
  CHECK(flat.is_contiguous());
  CHECK(flat.at({1}) == base.at({1, 0}));
  // contiguous() of a contiguous tensor is the same storage; of a view, a copy
  CHECK(base.contiguous().storage() == base.storage());
  CHECK(tt.contiguous().storage() != base.storage());
  Tensor cl = base.clone();
  cl.fill_(0);
  CHECK(base.at({2, 1}) == 9.0);
}

TEST_CASE("dtype conversions round trip and round correctly") {
  Tensor a = from_vector<double>({1.5, -2.25, 3.0, 1e-3}, {4});
  for (DType d : {DType::float32, DType::float16, DType::bfloat16}) {
    Tensor b = a.to(d).to(DType::float64);
    CHECK(b.at({0}) == 1.5);
    CHECK(b.at({1}) == -2.25);
  }
  CHECK(a.to(DType::int64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3, 0});
  CHECK(a.to(DType::bool_).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 1, 1});
  CHECK(from_vector<int64_t>({300}).to(DType::uint8).at({0}) == 44.0);  // wraps like a C cast
  // float16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 -> rounds to even (1)
  CHECK(round_to_half(1.0f + std::ldexp(1.0f, -11)) == 1.0f);
  CHECK(round_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(round_to_half(65504.0f) == 65504.0f);
  CHECK(std::isinf(round_to_half(65520.0f)));
  CHECK(round_to_half(65519.0f) == 65504.0f);
  CHECK(round_to_half(std::ldexp(1.0f, -24)) == std::ldexp(1.0f, -24));       // smallest subnormal
  CHECK(round_to_half(std::ldexp(1.0f, -25)) == 0.0f);                        // tie -> even (0)
  CHECK(round_to_half(std::ldexp(1.5f, -25)) == std::ldexp(1.0f, -24));
  CHECK(std::isnan(round_to_half(NAN)));
  CHECK(Half(-0.0f).bits == 0x8000);
  CHECK(Half(1.0f).bits == 0x3c00);
  // bfloat16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> even (1); 1 + 3*2^-8 -> 1 + 2^-6
  CHECK(round_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  CHECK(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(std::isnan(round_to_bf16(NAN)));
  CHECK(std::isinf(round_to_bf16(INFINITY)));
  // exhaustive: every finite half converts to float and back to the same bits
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7c00) == 0x7c00) continue;
    Half h = Half::from_bits(uint16_t(b));
    REQUIRE(Half(float(h)).bits == uint16_t(b));
  }
  CHECK(dtype_size(DType::bfloat16) == 2);
  CHECK(std::string(dtype_name(DType::int32)) == "int32");
  CHECK(promote_types(DType::int64, DType::float32) == DType::float32);
  CHECK(promote_types(DType::float16, DType::bfloat16) == DType::float32);
}

TEST_CASE("printing is readable") {
  Tensor a = from_vector<float>({1, 2.5, -3, 4}, {2, 2});
  std::string s = a.str();
  CHECK(s.find("tensor([[") == 0);
  CHECK(s.find("2.5000") != std::string::npos);
  CHECK(from_vector<int64_t>({1, 2}).str() == "tensor([1, 2])");
  Tensor big = zeros({100, 100});
  CHECK(big.str().find("...") != std::string::npos);
  Tensor r = ones({2}).requires_grad_();
  CHECK(r.str().find("requires_grad=True") != std::string::npos);
  CHECK(Tensor().str() == "tensor(undefined)");
}

TEST_CASE("memory stats count CPU bytes") {
  MemoryStats before = memory_stats();
  {
    Tensor t = empty({1024, 1024});
    MemoryStats during = memory_stats();
    CHECK(during.current_bytes - before.current_bytes == 4 * 1024 * 1024);
    CHECK(during.peak_bytes >= during.current_bytes);
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
  CHECK(memory_stats().current_bytes == before.current_bytes);
  // the freed 4 MiB block is cached and handed out again for the same size
  void* first = nullptr;
  {
    Tensor a = empty({1024, 1024});
    first = a.raw_data();
  }
  CHECK(memory_stats().reserved_bytes >= memory_stats().current_bytes + 4 * 1024 * 1024);
  {
    Tensor b = empty({1024, 1024});
    CHECK(b.raw_data() == first);
  }
  empty_cache();
  CHECK(memory_stats().reserved_bytes - memory_stats().current_bytes < 4 * 1024 * 1024);
  reset_peak_memory_stats();
  CHECK(memory_stats().peak_bytes == memory_stats().current_bytes);
}

TEST_CASE("devices parse and CUDA without a backend is a clear error") {
  CHECK(Device("cpu").is_cpu());
  CHECK(Device("cuda:1").index == 1);
  CHECK(Device("cuda").str() == "cuda:0");
  CHECK_THROWS_AS(Device("tpu"), Error);
  CHECK_THROWS_AS(Device("cuda:x"), Error);
#ifndef KILN_WITH_CUDA
  CHECK_THROWS_AS(zeros({2}, {.device = Device::cuda(0)}), Error);
#endif
}

TEST_CASE("bad input is a kiln::Error naming the problem") {
  Tensor a = zeros({2, 3});
  CHECK(test::error_of([&] { a.reshape({4, 2}); }).find("[4, 2]") != std::string::npos);
  CHECK(test::error_of([&] { a.select(2, 0); }).find("dim 2") != std::string::npos);
  CHECK(test::error_of([&] { a.select(0, 5); }).find("index 5") != std::string::npos);
  CHECK(test::error_of([&] { a.narrow(1, 2, 2); }).find("exceeds") != std::string::npos);
  CHECK(test::error_of([&] { a.permute({0, 0}); }).find("repeated") != std::string::npos);
  CHECK(test::error_of([&] { a.expand({3, 3}); }).find("[2, 3]") != std::string::npos);
  CHECK(test::error_of([&] { a.item(); }).find("one element") != std::string::npos);
  CHECK(test::error_of([&] { a.at({0, 9}); }).find("out of range") != std::string::npos);
  CHECK(test::error_of([&] { a.data<double>(); }).find("float32") != std::string::npos);
  CHECK(test::error_of([&] { Tensor().shape(); }).find("undefined") != std::string::npos);
  CHECK(test::error_of([&] { zeros({2}, {.dtype = DType::int64}).requires_grad_(); }).find("int64") != std::string::npos);
  CHECK(test::error_of([&] { zeros({-1}); }).find("negative") != std::string::npos);
  CHECK(test::error_of([&] { from_vector<float>({1, 2, 3}, {2, 2}); }).find("[2, 2]") != std::string::npos);
}

TEST_CASE("element counts that overflow int64 are errors naming the op and the shape") {
  constexpr int64_t k32 = int64_t(1) << 32;
  // 2^32 x 2^32 used to wrap to 0 elements; select().item() then read far outside the storage
  std::string e = test::error_of([&] { zeros({k32, k32}).select(0, 1000).select(0, 1000).item(); });
  CHECK(e.find("zeros") != std::string::npos);
  CHECK(e.find("[4294967296, 4294967296]") != std::string::npos);
  CHECK(e.find("overflows int64") != std::string::npos);
  e = test::error_of([&] { randn({int64_t(1) << 62, 4}); });  // used to be accepted with numel 0
  CHECK(e.find("randn") != std::string::npos);
  CHECK(e.find("[4611686018427387904, 4]") != std::string::npos);
  // byte sizes: the element count fits, count * itemsize does not
  e = test::error_of([&] { empty({int64_t(1) << 61}, {.dtype = DType::float64}); });
  CHECK(e.find("empty") != std::string::npos);
  CHECK(e.find("overflows int64") != std::string::npos);
  // a zero size does not hide an overflowing stride
  CHECK(test::error_of([&] { zeros({0, k32, k32}); }).find("overflows int64") != std::string::npos);
  CHECK(test::error_of([&] { ones({2, -3}); }).find("negative size -3") != std::string::npos);
  CHECK(test::error_of([&] { arange(0.0, 1e30); }).find("arange") != std::string::npos);
}

TEST_CASE("views check their sizes, offsets and strides for overflow") {
  constexpr int64_t k32 = int64_t(1) << 32, big = std::numeric_limits<int64_t>::max();
  Tensor one = zeros({1, 1});
  std::string e = test::error_of([&] { one.expand({k32, k32}); });
  CHECK(e.find("expand") != std::string::npos);
  CHECK(e.find("overflows int64") != std::string::npos);
  CHECK(test::error_of([&] { one.expand({1, -2}); }).find("invalid size -2") != std::string::npos);
  CHECK(test::error_of([&] { one.reshape({k32, k32, 0}); }).find("overflows int64") != std::string::npos);
  CHECK(test::error_of([&] { one.view({-1, k32, k32}); }).find("overflows int64") != std::string::npos);
  CHECK(test::error_of([&] { one.reshape({1, -2}); }).find("invalid size -2") != std::string::npos);
  Tensor a = arange(10.0);
  CHECK(test::error_of([&] { a.narrow(0, 5, big); }).find("exceeds") != std::string::npos);
  CHECK(a.slice(0, 1, big, big).to_vector<float>() == std::vector<float>{1});  // step past the end: one element
  CHECK(a.slice(0, 2, 9, 3).to_vector<float>() == std::vector<float>{2, 5, 8});
  CHECK(test::error_of([&] { add(one.expand({k32, 1}), one.expand({1, k32})); }).find("add") != std::string::npos);
  CHECK(test::error_of([&] { cat({one.expand({big / 2 + 1, 1}), one.expand({big / 2 + 1, 1})}); })
            .find("cat") != std::string::npos);
}

// Values printed by PyTorch 2.15 for the same calls.
TEST_CASE("arange, linspace, randint, rand and full as PyTorch: lengths, values, ranges and refusals") {
  const TensorOptions f64{.dtype = DType::float64};
  CHECK(arange(0, 0.1 + 0.2, 0.1, f64).numel() == 4);  // ceil(3.0000000000000004), was 3
  CHECK(arange(0, 1e-13, 1, f64).to_vector<double>() == std::vector<double>{0});
  CHECK(arange(-3.5, 2, 1.5, {.dtype = DType::int64}).to_vector<int64_t>() == std::vector<int64_t>{-3, -2, -1, 0});
  CHECK(arange(5, 1, -2).to_vector<double>() == std::vector<double>{5, 3});
  CHECK(arange(2, 2, 1).numel() == 0);
  CHECK_THROWS_AS(arange(0, 10, -1), Error);  // the step's sign against the range (was empty)
  CHECK_THROWS_AS(arange(10, 0, 1), Error);
  CHECK_THROWS_AS(arange(-1.0), Error);
  CHECK_THROWS_AS(arange(0, 1, INFINITY), Error);
  CHECK_THROWS_AS(arange(0, std::nan(""), 1), Error);
  CHECK_THROWS_AS(arange(0, 3, 1, {.dtype = DType::bool_}), Error);
  // linspace from both ends, in the dtype's arithmetic; one step is start
  CHECK(linspace(0, 1, 7).to_vector<float>() ==
        std::vector<float>{0.0f, 0.1666666716337204f, 0.3333333432674408f, 0.5f, 0.6666666269302368f,
                           0.8333333134651184f, 1.0f});
  CHECK(linspace(-1.3, 2.7, 11, f64).to_vector<double>() ==
        std::vector<double>{-1.3, -0.9, -0.5, -0.09999999999999998, 0.30000000000000004, 0.7000000000000001, 1.1, 1.5,
                            1.9000000000000001, 2.3000000000000003, 2.7});
  CHECK(linspace(3, 8, 1).to_vector<double>() == std::vector<double>{3});  // was 8
  // an integer linspace truncates its ends first (PyTorch 2.15's values)
  const TensorOptions i64{.dtype = DType::int64};
  CHECK(linspace(0, 10, 4, i64).to_vector<int64_t>() == std::vector<int64_t>{0, 3, 6, 10});
  CHECK(linspace(-5.5, 5.5, 4, i64).to_vector<int64_t>() == std::vector<int64_t>{-5, -1, 1, 5});
  CHECK(linspace(0.5, 9.7, 5, i64).to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4, 6, 9});  // was 0, 2, 5, 7, 9
  CHECK_THROWS_AS(linspace(std::nan(""), 1, 3, i64), Error);
  // eye as torch.eye
  CHECK(eye(2, 3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0});
  CHECK(eye(3, 2, i64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 1, 0, 0});
  CHECK(eye(2).shape() == Shape{2, 2});
  CHECK(eye(0).numel() == 0);
  CHECK(eye(2, 0).shape() == Shape{2, 0});
  CHECK(eye(2, 2, {.dtype = DType::bool_}).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0, 1});
  CHECK_THROWS_AS(eye(-1), Error);
  // randint draws exactly in int64: values stay in [low, high) at the ends of the range
  const int64_t mx = std::numeric_limits<int64_t>::max();
  for (int64_t v : randint(mx - 11, mx - 1, {1000}).to_vector<int64_t>()) CHECK((v >= mx - 11 && v < mx - 1));
  for (int64_t v : randint((int64_t(1) << 55) + 1, (int64_t(1) << 55) + 4, {1000}).to_vector<int64_t>())
    CHECK((v >= (int64_t(1) << 55) + 1 && v < (int64_t(1) << 55) + 4));
  CHECK_NOTHROW(randint(std::numeric_limits<int64_t>::min(), mx, {16}));  // high - low overflowed
  CHECK_THROWS_AS(randint(0, 300, {4}, {.dtype = DType::uint8}), Error);
  CHECK_THROWS_AS(randint(-1, 3, {4}, {.dtype = DType::uint8}), Error);
  CHECK(randint(0, 256, {64}, {.dtype = DType::uint8}).dtype() == DType::uint8);
  // rand in 16 bits stays below 1 (rounding a 24-bit uniform reached 1.0 about once in 500 bf16 draws)
  manual_seed(5);
  for (DType dt : {DType::float16, DType::bfloat16}) {
    const std::vector<float> u = rand({20000}, {.dtype = dt}).to_vector<float>();
    CHECK(*std::max_element(u.begin(), u.end()) < 1.0f);
    CHECK(*std::min_element(u.begin(), u.end()) >= 0.0f);
  }
  CHECK_THROWS_AS(rand({3}, {.dtype = DType::int64}), Error);
  CHECK_THROWS_AS(randn({3}, {.dtype = DType::bool_}), Error);
  // full / fill_ with a value the dtype cannot hold: an error, not an undefined conversion
  CHECK_THROWS_AS(full({2}, 300, {.dtype = DType::uint8}), Error);
  CHECK_THROWS_AS(full({2}, 1e10, {.dtype = DType::int32}), Error);
  CHECK_THROWS_AS(full({2}, std::nan(""), {.dtype = DType::int64}), Error);
  CHECK_THROWS_AS(full({2}, 70000, {.dtype = DType::float16}), Error);
  CHECK_THROWS_AS(zeros({2}, {.dtype = DType::int32}).fill_(-3e9), Error);
  CHECK(full({2}, 2.5, {.dtype = DType::int64}).to_vector<int64_t>() == std::vector<int64_t>{2, 2});  // truncates
  CHECK(std::isinf(full({1}, INFINITY, {.dtype = DType::float16}).item()));
}

TEST_CASE("float to integer conversions of NaN, inf and out-of-range values are defined (PyTorch's x86 results)") {
  const double nan = std::nan(""), inf = INFINITY;
  Tensor x = from_vector<double>({nan, inf, -1.0, 3e9, 1099511627783.0});  // 2^40 + 7
  CHECK(x.to(DType::int32).to_vector<int32_t>() ==
        std::vector<int32_t>{INT32_MIN, INT32_MIN, -1, INT32_MIN, INT32_MIN});
  CHECK(x.to(DType::uint8).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 255, 0, 7});
  CHECK(x.to(DType::int64).to_vector<int64_t>() ==
        std::vector<int64_t>{INT64_MIN, INT64_MIN, -1, 3000000000, 1099511627783});
  CHECK(x.slice(0, 0, 5, 2).to(DType::int64).to_vector<int64_t>() ==  // a strided source too
        std::vector<int64_t>{INT64_MIN, -1, 1099511627783});
  // integer values survive item<int64_t>() and printing (they went through a double)
  const int64_t mx = std::numeric_limits<int64_t>::max();
  Tensor big = from_vector<int64_t>({mx});
  CHECK(big.item<int64_t>() == mx);
  CHECK(from_vector<int64_t>({(int64_t(1) << 53) + 1}).item<int64_t>() == (int64_t(1) << 53) + 1);
  CHECK(big.str().find("9223372036854775807") != std::string::npos);
  CHECK(from_vector<double>({2.9}).item<int>() == 2);
}
