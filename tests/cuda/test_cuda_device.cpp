// The CUDA runtime of kiln on a GPU: devices, streams, events, the caching allocator's
// statistics and out-of-memory error, host<->device copies of every dtype and layout, and
// pinned host memory. Without a GPU these report themselves skipped, and the test that
// runs instead checks that CUDA calls fail with clear kiln::Errors.
#include <doctest/doctest.h>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;

namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}
}  // namespace

TEST_CASE("without a GPU, CUDA tensors and runtime calls are clear errors" * doctest::skip(!kNoGpu)) {
  CHECK(cuda::device_count() == 0);
  std::string e = test::error_of([] { zeros({2, 3}, {.device = kGpu}); });
#ifdef KILN_WITH_CUDA
  CHECK(has(e, "cuda:0"));
  CHECK(has(e, "no CUDA device"));
  // the kernels are registered even without a GPU (tests may ask supports())
  CHECK(supports(Op::relu, DeviceType::CUDA));
  CHECK(supports(Op::add, DeviceType::CUDA));
  CHECK(supports(Op::where, DeviceType::CUDA));
  // a failing CUDA call names itself, the CUDA error, the file and the line
  std::string s = test::error_of([] { cuda::synchronize(); });
  CHECK(has(s, "cudaDeviceSynchronize()"));
  CHECK(has(s, "runtime.cu:"));
  CHECK(has(s, "CUDA error"));
  MESSAGE("a failing CUDA call reads: ", s);
  CHECK(has(test::error_of([] { cuda::set_device(0); }), "no CUDA device"));
#else
  CHECK(has(e, "no CUDA backend"));
  CHECK_FALSE(supports(Op::relu, DeviceType::CUDA));
#endif
  CHECK_THROWS_AS(cuda::pinned_empty({4}), Error);
  CHECK_THROWS_AS(cuda::Stream::create(), Error);
  CHECK_FALSE(cuda::is_pinned(zeros({2})));
}

TEST_CASE("devices, streams and events" * doctest::skip(kNoGpu)) {
  CHECK(cuda::device_count() >= 1);
  cuda::set_device(0);
  CHECK(cuda::current_device() == 0);
  CHECK(has(cuda::device_name(0), "sm_"));
  CHECK(has(test::error_of([] { cuda::set_device(cuda::device_count()); }), "does not exist"));
  CHECK(has(test::error_of([] { zeros({2}, {.device = Device::cuda(cuda::device_count())}); }), "CUDA device"));

  CHECK(cuda::current_stream().is_default());
  cuda::Stream s = cuda::Stream::create();
  CHECK_FALSE(s.is_default());
  Tensor x = arange(0.0, 100000.0).to(kGpu);
  Tensor y;
  cuda::Event start, stop;
  {
    cuda::StreamGuard guard(s);
    CHECK(cuda::current_stream() == s);
    start.record();
    y = mul(add(x, 1.0), 2.0);  // kernels and allocations on s
    stop.record();
  }
  CHECK(cuda::current_stream().is_default());
  stop.synchronize();
  CHECK(stop.query());
  CHECK(start.elapsed_ms(stop) >= 0.0f);
  s.synchronize();
  CHECK(s.query());
  std::vector<float> v = y.to_vector<float>();
  CHECK(v[0] == 2.0f);
  CHECK(v[99999] == 200000.0f);
  cuda::Event untimed(false);
  untimed.record(s);
  untimed.wait(cuda::current_stream());
  CHECK_THROWS_AS(untimed.elapsed_ms(stop), Error);
  cuda::synchronize();
}

TEST_CASE("the caching allocator: statistics, reuse, empty_cache, out-of-memory error" * doctest::skip(kNoGpu)) {
  cuda::synchronize();
  const MemoryStats before = memory_stats(kGpu);
  {
    Tensor t = Tensor::empty({1000, 250}, DType::float32, kGpu);  // 1,000,000 bytes
    const MemoryStats s = memory_stats(kGpu);
    CHECK(s.current_bytes == before.current_bytes + 1000000);
    CHECK(s.peak_bytes >= s.current_bytes);
    CHECK(s.reserved_bytes >= s.current_bytes);
    CHECK(s.num_allocs == before.num_allocs + 1);
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 512 == 0);
  }
  CHECK(memory_stats(kGpu).current_bytes == before.current_bytes);
  const int64_t reserved = memory_stats(kGpu).reserved_bytes;
  {
    Tensor again = Tensor::empty({250000}, DType::float32, kGpu);
    CHECK(memory_stats(kGpu).reserved_bytes == reserved);  // served from the cache, no new segment
  }
  empty_cache(kGpu);
  CHECK(memory_stats(kGpu).reserved_bytes <= reserved);
  reset_peak_memory_stats(kGpu);
  CHECK(memory_stats(kGpu).peak_bytes == memory_stats(kGpu).current_bytes);

  std::string e = test::error_of([] { Tensor::empty({int64_t(1) << 40}, DType::float32, kGpu); });
  CHECK(has(e, "out of memory"));
  CHECK(has(e, "cuda:0"));
  CHECK(has(e, "4398046511104 bytes"));
  CHECK(has(e, "free of"));
  CHECK(has(e, "reserved"));
  CHECK(has(e, "--accum"));
  CHECK(has(e, "--checkpoint-activations"));
  CHECK(has(e, "--amp"));
  Tensor ok = ones({16}, {.device = kGpu});  // the device still works after the failure
  CHECK(ok.to_vector<float>()[15] == 1.0f);
}

TEST_CASE("copies: every dtype and layout round-trips between host and device" * doctest::skip(kNoGpu)) {
  manual_seed(7);
  for (DType dt : {DType::float32, DType::float64, DType::float16, DType::bfloat16, DType::int64, DType::int32,
                   DType::uint8, DType::bool_}) {
    CAPTURE(std::string(dtype_name(dt)));
    Tensor h = mul(randn({37, 53}), 20.0);
    h = (dt == DType::uint8 ? abs(h) : h).to(dt);
    Tensor d = h.to(kGpu);
    CHECK(d.device() == kGpu);
    CHECK(same_values(d.to(Device::cpu()), h));                                   // contiguous both ways
    CHECK(same_values(h.t().to(kGpu).to(Device::cpu()), h.t().contiguous()));     // strided host source
    CHECK(same_values(d.t().to(Device::cpu()), h.t().contiguous()));              // strided device source
    Tensor back = zeros({53, 37}, {.dtype = dt});
    back.copy_(d.t());                                                            // device -> contiguous host
    CHECK(same_values(back, h.t().contiguous()));
    Tensor back_t = zeros({37, 53}, {.dtype = dt}).t();
    back_t.copy_(d.t());                                                          // device -> strided host
    CHECK(same_values(back_t.contiguous(), h.t().contiguous()));
    Tensor dd = zeros({37, 53}, {.dtype = dt, .device = kGpu});
    dd.copy_(d);                                                                  // device -> device
    CHECK(same_values(dd.to(Device::cpu()), h));
    CHECK(same_values(d.clone().to(Device::cpu()), h));
    CHECK(d.slice(0, 3, 4).select(1, 5).item() == h.slice(0, 3, 4).select(1, 5).item());
  }
  // a broadcast host source is uploaded once and expanded on the device
  Tensor row = randn({1, 64});
  Tensor big = zeros({300, 64}, {.device = kGpu});
  big.copy_(row);
  CHECK(same_values(big.to(Device::cpu()), row.expand({300, 64}).contiguous()));
  // zero-size tensors
  CHECK(zeros({0, 3}, {.device = kGpu}).to(Device::cpu()).numel() == 0);
}

TEST_CASE("pinned host memory: asynchronous uploads that outlive their source" * doctest::skip(kNoGpu)) {
  Tensor p = cuda::pinned_empty({64, 1000});
  CHECK(cuda::is_pinned(p));
  CHECK(cuda::is_pinned(p.slice(0, 2, 5)));
  CHECK_FALSE(cuda::is_pinned(zeros({3})));
  CHECK(p.is_cpu());
  CHECK(p.is_contiguous());
  CHECK(reinterpret_cast<uintptr_t>(p.raw_data()) % 4096 == 0);
  Tensor d;
  {
    Tensor q = cuda::pinned_empty({64, 1000});
    q.copy_(arange(0.0, 64000.0).reshape({64, 1000}));
    d = q.to(kGpu);  // asynchronous; q's memory is released only after the copy has run
  }
  std::vector<float> v = d.to_vector<float>();
  CHECK(v[0] == 0.0f);
  CHECK(v[63999] == 63999.0f);
  Tensor b = cuda::pinned_empty({5}, DType::int64);
  b.fill_(3.0);
  CHECK(b.to(kGpu).to(DType::float32).to_vector<float>() == std::vector<float>(5, 3.0f));
  CHECK(cuda::pinned_empty({0}).numel() == 0);
}
