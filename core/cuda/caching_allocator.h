// The bookkeeping of kiln's caching GPU allocator, in plain host C++ over a pair of raw
// alloc/free functions (cudaMalloc/cudaFree on a GPU, a fake in the CPU test). Requests
// are rounded to 512 B; small ones (<= 1 MiB) are carved from 2 MiB segments, large ones
// from segments rounded to 2 MiB. Freed blocks go to a free list of their stream, are
// merged with free neighbours of the same segment, and are reused by later requests on
// that stream (best fit), split when much larger than needed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include "kiln/core/allocator.h"
#include "kiln/core/error.h"

namespace kiln::cuda {

/// The raw memory calls a BlockAllocator sits on.
struct RawMemory {
  /// nbytes of fresh memory, or nullptr when the device is out of memory (other failures throw).
  void* (*alloc)(void* ctx, size_t nbytes) = nullptr;
  /// Returns memory from alloc (only whole segments, only when nothing in them is in use).
  void (*free)(void* ctx, void* ptr) = nullptr;
  /// Free and total bytes of the device, for the out-of-memory message.
  void (*mem_info)(void* ctx, size_t* free_bytes, size_t* total_bytes) = nullptr;
  void* ctx = nullptr;
};

/// "1.5 GiB", "512 B".
inline std::string format_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024.0 && u < 5) { v /= 1024.0; ++u; }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

/// The caching allocator of one device. Thread-safe. Streams are opaque keys.
class BlockAllocator {
 public:
  static constexpr size_t kRound = 512;                       ///< every block is a multiple of this
  static constexpr size_t kSmallRequest = size_t(1) << 20;    ///< requests up to this use the small pool
  static constexpr size_t kSmallSegment = size_t(2) << 20;    ///< segment size of the small pool
  static constexpr size_t kLargeRound = size_t(2) << 20;      ///< large segments are multiples of this

  BlockAllocator(RawMemory raw, std::string device_name) : raw_(raw), name_(std::move(device_name)) {}
  /// Returns the wholly free segments to the device. Segments with a block still in use
  /// stay allocated (their tensors may still be read); only their bookkeeping is freed.
  ~BlockAllocator() {
    std::lock_guard<std::mutex> l(mu_);
    release_free_segments();
    for (auto* pool : {&small_free_, &large_free_})
      for (Block* b : *pool) delete b;
    for (auto& [ptr, b] : in_use_) delete b;
  }
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  /// nbytes rounded up to a multiple of 512 (at least 512).
  static size_t round_size(size_t nbytes) {
    return nbytes <= kRound ? kRound : (nbytes + kRound - 1) / kRound * kRound;
  }
  /// The segment allocated from the device for a rounded request when no cached block fits.
  static size_t segment_size(size_t rounded) {
    return rounded <= kSmallRequest ? kSmallSegment : (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
  }

  /// A block of at least nbytes for use on `stream`. On out-of-memory: frees the cached
  /// segments and retries once, then throws kiln::Error with the numbers and advice.
  void* allocate(size_t nbytes, const void* stream) {
    std::lock_guard<std::mutex> l(mu_);
    const size_t size = round_size(nbytes);
    const bool small = size <= kSmallRequest;
    std::set<Block*, BlockLess>& pool = small ? small_free_ : large_free_;
    Block* b = nullptr;
    Block key;
    key.size = size;
    key.stream = stream;
    auto it = pool.lower_bound(&key);
    if (it != pool.end() && (*it)->stream == stream) {
      b = *it;
      pool.erase(it);
    } else {
      b = new_segment(nbytes, size, small, stream);
    }
    // split off the rest when it is worth keeping as a block of its own
    const size_t rest = b->size - size;
    if (small ? rest >= kRound : rest > kSmallRequest) {
      Block* r = new Block;
      r->ptr = b->ptr + size;
      r->size = rest;
      r->stream = stream;
      r->small = small;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      pool.insert(r);
    }
    b->allocated = true;
    b->requested = nbytes;
    in_use_[b->ptr] = b;
    current_ += int64_t(nbytes);
    in_blocks_ += int64_t(b->size);
    if (current_ > peak_) peak_ = current_;
    ++num_allocs_;
    return b->ptr;
  }

  /// Returns a block to its stream's free list, merged with free neighbours. Unknown
  /// pointers are ignored (returns false): this runs in destructors and must not throw.
  bool deallocate(void* ptr) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = in_use_.find(static_cast<char*>(ptr));
    if (it == in_use_.end()) return false;
    Block* b = it->second;
    in_use_.erase(it);
    current_ -= int64_t(b->requested);
    in_blocks_ -= int64_t(b->size);
    b->allocated = false;
    b->requested = 0;
    std::set<Block*, BlockLess>& pool = b->small ? small_free_ : large_free_;
    if (b->prev && !b->prev->allocated) {  // merge into the free block before
      Block* p = b->prev;
      pool.erase(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next) b->next->prev = p;
      delete b;
      b = p;
    }
    if (b->next && !b->next->allocated) {  // absorb the free block after
      Block* n = b->next;
      pool.erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      delete n;
    }
    pool.insert(b);
    return true;
  }

  /// Returns every fully free segment to the device.
  void empty_cache() {
    std::lock_guard<std::mutex> l(mu_);
    release_free_segments();
  }

  /// current: bytes asked for by live allocations; reserved: bytes held from the device.
  MemoryStats stats() const {
    std::lock_guard<std::mutex> l(mu_);
    MemoryStats s;
    s.current_bytes = current_;
    s.peak_bytes = peak_;
    s.reserved_bytes = reserved_;
    s.num_allocs = num_allocs_;
    return s;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> l(mu_);
    peak_ = current_;
  }

  // ---- introspection (tests, diagnostics) ----
  /// Bytes in free cached blocks.
  int64_t cached_bytes() const {
    std::lock_guard<std::mutex> l(mu_);
    return reserved_ - in_blocks_;
  }
  /// Segments held from the device.
  int64_t segment_count() const {
    std::lock_guard<std::mutex> l(mu_);
    return segments_;
  }
  /// Free blocks on the free lists (after merging).
  size_t free_block_count() const {
    std::lock_guard<std::mutex> l(mu_);
    return small_free_.size() + large_free_.size();
  }
  /// The rounded size of a live block (0 if ptr is not one).
  size_t block_size(const void* ptr) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = in_use_.find(static_cast<char*>(const_cast<void*>(ptr)));
    return it == in_use_.end() ? 0 : it->second->size;
  }

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;          // bytes of the block (a multiple of kRound)
    size_t requested = 0;     // bytes asked for (0 when free)
    const void* stream = nullptr;
    bool small = false;       // which pool
    bool allocated = false;
    Block* prev = nullptr;    // neighbours within the same segment
    Block* next = nullptr;
  };
  // Free lists ordered by (stream, size, address): lower_bound finds the best fit.
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const {
      if (a->stream != b->stream) return std::less<const void*>()(a->stream, b->stream);
      if (a->size != b->size) return a->size < b->size;
      return std::less<const char*>()(a->ptr, b->ptr);
    }
  };

  Block* new_segment(size_t nbytes, size_t size, bool small, const void* stream) {
    const size_t seg = segment_size(size);
    void* p = seg >= size ? raw_.alloc(raw_.ctx, seg) : nullptr;  // seg < size: the rounding overflowed
    if (!p) {
      release_free_segments();  // free the cache, retry once
      p = seg >= size ? raw_.alloc(raw_.ctx, seg) : nullptr;
    }
    if (!p) throw_out_of_memory(nbytes, seg);
    Block* b = new Block;
    b->ptr = static_cast<char*>(p);
    b->size = seg;
    b->stream = stream;
    b->small = small;
    reserved_ += int64_t(seg);
    ++segments_;
    return b;
  }

  void release_free_segments() {
    for (auto* pool : {&small_free_, &large_free_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (!b->prev && !b->next) {  // the block is a whole segment
          raw_.free(raw_.ctx, b->ptr);
          reserved_ -= int64_t(b->size);
          --segments_;
          delete b;
          it = pool->erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  [[noreturn]] void throw_out_of_memory(size_t nbytes, size_t seg) {
    size_t free_b = 0, total_b = 0;
    if (raw_.mem_info) raw_.mem_info(raw_.ctx, &free_b, &total_b);
    KILN_FAIL("CUDA out of memory on ", name_, ": tried to allocate ", format_bytes(nbytes), " (", nbytes,
              " bytes, a ", format_bytes(seg), " segment); the device has ", format_bytes(free_b), " free of ",
              format_bytes(total_b), "; kiln holds ", format_bytes(uint64_t(reserved_)), " reserved (",
              format_bytes(uint64_t(in_blocks_)), " in use by tensors; its cache was freed and the allocation "
              "retried). Try a smaller batch size, gradient accumulation (--accum N), activation checkpointing "
              "(--checkpoint-activations) or mixed precision (--amp); free tensors you no longer need.");
  }

  RawMemory raw_;
  std::string name_;
  mutable std::mutex mu_;
  std::set<Block*, BlockLess> small_free_, large_free_;
  std::unordered_map<char*, Block*> in_use_;
  int64_t current_ = 0, peak_ = 0, reserved_ = 0, in_blocks_ = 0, num_allocs_ = 0, segments_ = 0;
};

}  // namespace kiln::cuda
