// The caching GPU allocator's bookkeeping (core/cuda/caching_allocator.h) over a fake
// device: rounding, splitting, coalescing, per-stream reuse, the out-of-memory retry and
// error, and the statistics. Runs on the CPU, without a GPU.
#include <doctest/doctest.h>
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>
#include "kiln/core/cuda/caching_allocator.h"
#include "gradcheck.h"

using kiln::cuda::BlockAllocator;
using kiln::cuda::RawMemory;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// A fake device: hands out address ranges (never dereferenced) up to a capacity.
struct FakeDevice {
  size_t capacity = 64 * MiB;
  size_t used = 0;
  int allocs = 0, frees = 0, failed = 0;
  uintptr_t next = uintptr_t(1) << 40;
  std::map<uintptr_t, size_t> live;  // segment start -> size

  static void* alloc(void* ctx, size_t n) {
    auto* d = static_cast<FakeDevice*>(ctx);
    if (d->used + n > d->capacity) {
      ++d->failed;
      return nullptr;
    }
    uintptr_t p = d->next;
    d->next += (n + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) + 2 * MiB;  // gaps: segments never touch
    d->live[p] = n;
    d->used += n;
    ++d->allocs;
    return reinterpret_cast<void*>(p);
  }
  static void free(void* ctx, void* p) {
    auto* d = static_cast<FakeDevice*>(ctx);
    auto it = d->live.find(reinterpret_cast<uintptr_t>(p));
    REQUIRE(it != d->live.end());  // only whole segments from alloc come back
    d->used -= it->second;
    d->live.erase(it);
    ++d->frees;
  }
  static void info(void* ctx, size_t* free_b, size_t* total_b) {
    auto* d = static_cast<FakeDevice*>(ctx);
    *free_b = d->capacity - d->used;
    *total_b = d->capacity;
  }
  RawMemory raw() { return RawMemory{&alloc, &free, &info, this}; }
};

const void* const kStreamA = reinterpret_cast<const void*>(0x1000);
const void* const kStreamB = reinterpret_cast<const void*>(0x2000);

char* cp(void* p) { return static_cast<char*>(p); }

}  // namespace

TEST_CASE("requests round to 512 B; small ones come from 2 MiB segments, large ones from 2 MiB multiples") {
  CHECK(BlockAllocator::round_size(0) == 512);
  CHECK(BlockAllocator::round_size(1) == 512);
  CHECK(BlockAllocator::round_size(512) == 512);
  CHECK(BlockAllocator::round_size(513) == 1024);
  CHECK(BlockAllocator::round_size(1000000) == 1000448);
  CHECK(BlockAllocator::segment_size(512) == 2 * MiB);
  CHECK(BlockAllocator::segment_size(1 * MiB) == 2 * MiB);
  CHECK(BlockAllocator::segment_size(1 * MiB + 512) == 2 * MiB);
  CHECK(BlockAllocator::segment_size(3 * MiB) == 4 * MiB);
  CHECK(BlockAllocator::segment_size(4 * MiB) == 4 * MiB);
}

TEST_CASE("small blocks are split from one segment and merged back when freed") {
  FakeDevice dev;
  BlockAllocator a(dev.raw(), "cuda:0");
  void* p1 = a.allocate(1000, kStreamA);
  void* p2 = a.allocate(3000, kStreamA);
  void* p3 = a.allocate(100, kStreamA);
  CHECK(dev.allocs == 1);                 // one 2 MiB segment serves all three
  CHECK(cp(p2) == cp(p1) + 1024);         // 1000 -> 1024
  CHECK(cp(p3) == cp(p2) + 3072);         // 3000 -> 3072
  CHECK(a.block_size(p1) == 1024);
  CHECK(a.stats().current_bytes == 4100);
  CHECK(a.stats().reserved_bytes == int64_t(2 * MiB));
  CHECK(a.cached_bytes() == int64_t(2 * MiB - 1024 - 3072 - 512));
  CHECK(a.free_block_count() == 1);       // the rest of the segment

  a.deallocate(p2);                       // between two live blocks: stays on its own
  CHECK(a.free_block_count() == 2);
  a.deallocate(p1);                       // merges with p2's block
  CHECK(a.free_block_count() == 2);
  void* q = a.allocate(4000, kStreamA);   // fits the merged 4096 B hole exactly
  CHECK(q == p1);
  CHECK(dev.allocs == 1);
  a.deallocate(q);
  a.deallocate(p3);                       // everything merges into the whole segment
  CHECK(a.free_block_count() == 1);
  CHECK(a.cached_bytes() == int64_t(2 * MiB));
  CHECK(a.stats().current_bytes == 0);
  a.empty_cache();
  CHECK(dev.frees == 1);
  CHECK(dev.used == 0);
  CHECK(a.stats().reserved_bytes == 0);
  CHECK(a.segment_count() == 0);
}

TEST_CASE("freed blocks are reused best-fit, and only on their own stream") {
  FakeDevice dev;
  BlockAllocator a(dev.raw(), "cuda:0");
  void* big = a.allocate(8 * KiB, kStreamA);
  void* sep1 = a.allocate(512, kStreamA);
  void* small = a.allocate(4 * KiB, kStreamA);
  void* sep2 = a.allocate(512, kStreamA);
  a.deallocate(big);
  a.deallocate(small);
  CHECK(a.allocate(4 * KiB, kStreamA) == small);  // the 4 KiB hole, not the 8 KiB one
  CHECK(a.allocate(6 * KiB, kStreamA) == big);    // the 8 KiB hole, split
  CHECK(dev.allocs == 1);

  void* b = a.allocate(4 * KiB, kStreamB);         // another stream: its own segment
  CHECK(dev.allocs == 2);
  CHECK(dev.live.count(reinterpret_cast<uintptr_t>(b)) == 1);
  a.deallocate(b);
  void* b2 = a.allocate(2 * KiB, kStreamB);        // reuses stream B's segment
  CHECK(b2 == b);
  CHECK(dev.allocs == 2);
  for (void* p : {big, sep1, small, sep2, b2}) a.deallocate(p);  // all back: nothing leaks
  a.empty_cache();
  CHECK(dev.used == 0);
}

TEST_CASE("large blocks: segments rounded to 2 MiB, split only when the rest is over 1 MiB") {
  FakeDevice dev;
  BlockAllocator a(dev.raw(), "cuda:0");
  void* p = a.allocate(3 * MiB, kStreamA);
  CHECK(dev.allocs == 1);
  CHECK(dev.live.begin()->second == 4 * MiB);
  CHECK(a.block_size(p) == 4 * MiB);               // a 1 MiB rest is not split off
  a.deallocate(p);
  void* q = a.allocate(5 * MiB / 2, kStreamA);     // 2.5 MiB from the cached 4 MiB segment
  CHECK(q == p);
  CHECK(a.block_size(q) == 5 * MiB / 2);           // the 1.5 MiB rest is split off
  a.deallocate(q);
  void* r = a.allocate(6 * MiB, kStreamA);         // no cached block is big enough
  CHECK(dev.allocs == 2);
  a.deallocate(r);
  void* s = a.allocate(2 * MiB, kStreamA);         // best fit: the 4 MiB segment, rest 2 MiB split off
  CHECK(s == p);
  CHECK(a.block_size(s) == 2 * MiB);
  void* t = a.allocate(3 * MiB / 2, kStreamA);     // 1.5 MiB: the 2 MiB rest of the same segment
  CHECK(cp(t) == cp(s) + 2 * MiB);
  CHECK(dev.allocs == 2);
  a.deallocate(s);
  a.deallocate(t);
  CHECK(a.free_block_count() == 2);                // two whole segments
  a.empty_cache();
  CHECK(dev.used == 0);
}

TEST_CASE("out of memory: the cache is freed and the allocation retried once, then a clear error") {
  FakeDevice dev;
  dev.capacity = 8 * MiB;
  BlockAllocator a(dev.raw(), "cuda:0");
  void* keep = a.allocate(4 * MiB, kStreamA);
  a.deallocate(a.allocate(2 * MiB, kStreamA));     // a cached 2 MiB segment
  CHECK(a.stats().reserved_bytes == int64_t(6 * MiB));
  void* p = a.allocate(3 * MiB + 1, kStreamB);     // needs 4 MiB: only after the cache is freed
  CHECK(dev.failed == 1);
  CHECK(dev.frees == 1);
  CHECK(a.stats().reserved_bytes == int64_t(8 * MiB));
  const int64_t current = a.stats().current_bytes;

  std::string msg = kiln::test::error_of([&] { a.allocate(6 * MiB, kStreamA); });
  CHECK(dev.failed == 3);                          // tried, freed the (empty) cache, retried
  CHECK(msg.find("out of memory") != std::string::npos);
  CHECK(msg.find("cuda:0") != std::string::npos);
  CHECK(msg.find("6.0 MiB") != std::string::npos);         // asked for
  CHECK(msg.find("6291456 bytes") != std::string::npos);
  CHECK(msg.find("0 B free of 8.0 MiB") != std::string::npos);
  CHECK(msg.find("8.0 MiB reserved") != std::string::npos);
  for (const char* hint : {"smaller batch", "--accum", "--checkpoint-activations", "--amp"})
    CHECK(msg.find(hint) != std::string::npos);
  CHECK(a.stats().current_bytes == current);       // a failed allocation changes nothing
  a.deallocate(p);
  a.deallocate(keep);
  a.empty_cache();
  CHECK(dev.used == 0);
}

TEST_CASE("statistics: current, peak, reserved, number of allocations") {
  FakeDevice dev;
  BlockAllocator a(dev.raw(), "cuda:0");
  void* p = a.allocate(1000, kStreamA);
  void* q = a.allocate(5000, kStreamA);
  CHECK(a.stats().current_bytes == 6000);
  CHECK(a.stats().peak_bytes == 6000);
  CHECK(a.stats().num_allocs == 2);
  a.deallocate(q);
  CHECK(a.stats().current_bytes == 1000);
  CHECK(a.stats().peak_bytes == 6000);
  CHECK(a.stats().reserved_bytes == int64_t(2 * MiB));  // the cache keeps the segment
  a.reset_peak();
  CHECK(a.stats().peak_bytes == 1000);
  CHECK_FALSE(a.deallocate(reinterpret_cast<void*>(0x1234)));  // unknown pointers are ignored
  CHECK(a.stats().current_bytes == 1000);
  a.deallocate(p);
}

TEST_CASE("random allocations on two streams never overlap and merge back into whole segments") {
  FakeDevice dev;
  dev.capacity = 1024 * MiB;
  BlockAllocator a(dev.raw(), "cuda:0");
  std::mt19937 rng(7);
  struct Live { char* p; size_t n; const void* s; };
  std::vector<Live> live;
  int64_t expect_current = 0;
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || (live.size() < 60 && rng() % 2 == 0)) {
      size_t n = rng() % 4 == 0 ? size_t(rng() % (6 * MiB)) : size_t(rng() % (64 * KiB));
      const void* s = rng() % 2 ? kStreamA : kStreamB;
      char* p = cp(a.allocate(n, s));
      REQUIRE(a.block_size(p) >= BlockAllocator::round_size(n));
      live.push_back({p, n, s});
      expect_current += int64_t(n);
    } else {
      size_t i = rng() % live.size();
      REQUIRE(a.deallocate(live[i].p));
      expect_current -= int64_t(live[i].n);
      live.erase(live.begin() + long(i));
    }
    if (step % 500 == 0 || step == 3999) {
      std::vector<std::pair<char*, size_t>> iv;
      for (auto& l : live) iv.push_back({l.p, a.block_size(l.p)});
      std::sort(iv.begin(), iv.end());
      for (size_t i = 1; i < iv.size(); ++i) REQUIRE(iv[i - 1].first + iv[i - 1].second <= iv[i].first);
      for (auto& [p, n] : iv) {  // every block lies inside one segment of the device
        auto it = dev.live.upper_bound(reinterpret_cast<uintptr_t>(p));
        REQUIRE(it != dev.live.begin());
        --it;
        REQUIRE(reinterpret_cast<uintptr_t>(p) + n <= it->first + it->second);
      }
      CHECK(a.stats().current_bytes == expect_current);
      CHECK(a.stats().reserved_bytes == int64_t(dev.used));
    }
  }
  for (auto& l : live) a.deallocate(l.p);
  CHECK(a.stats().current_bytes == 0);
  CHECK(int64_t(a.free_block_count()) == a.segment_count());  // fully merged
  CHECK(a.cached_bytes() == a.stats().reserved_bytes);
  a.empty_cache();
  CHECK(dev.used == 0);
  CHECK(dev.live.empty());
}

TEST_CASE("BlockAllocator: destroyed with a block in use, it frees the free segments and keeps the used one") {
  FakeDevice dev;
  {
    BlockAllocator a(dev.raw(), "fake:0");
    void* kept = a.allocate(100 * KiB, kStreamA);       // small segment, stays in use
    void* freed = a.allocate(8 * MiB, kStreamA);        // large segment, freed before destruction
    void* neighbour = a.allocate(200 * KiB, kStreamA);  // split from kept's segment, freed
    a.deallocate(freed);
    a.deallocate(neighbour);
    CHECK(dev.live.size() == 2);
    CHECK(a.block_size(kept) == BlockAllocator::round_size(100 * KiB));
  }  // under ASan: no Block bookkeeping may leak here
  REQUIRE(dev.live.size() == 1);  // the segment of the live block is not handed back
  CHECK(dev.live.begin()->second == BlockAllocator::kSmallSegment);
  CHECK(dev.frees == 1);
}
