// DistributedDataParallel: every rank holds the whole model and trains on its own slice
// of each batch; the gradients are averaged over the ranks during backward, so every rank
// takes the same optimizer step. Gradients are grouped into buckets (about 25 MiB, in
// reverse registration order, which is about the order backward produces them); a
// bucket's all-reduce starts as soon as its last gradient is accumulated (a
// post-accumulate-grad hook), so communication overlaps the rest of backward.
//
//   dist::init();
//   auto model = std::make_shared<Net>();
//   dist::DistributedDataParallel ddp(model);          // rank 0's weights everywhere
//   for (...) {
//     { auto guard = ddp.no_sync(); ddp(x0).backward(); }  // accumulate locally
//     loss = ddp(x1); loss.backward();                     // the last micro-batch: averaged
//     opt.step(); opt.zero_grad();
//   }
#pragma once
#include <memory>
#include <string>
#include "kiln/nn/module.h"

namespace kiln::dist {

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25;       ///< gradient MiB per bucket (PyTorch's bucket_cap_mb)
  bool broadcast_buffers = true;   ///< rank 0's buffers (BatchNorm statistics) before every forward
};

namespace detail {
struct Reducer;
}

class DistributedDataParallel : public nn::Module {
 public:
  /// Wraps `module` (registered as the child "module"), broadcasts its parameters and
  /// buffers from rank 0, and hooks its parameters. Every parameter that requires grad
  /// must receive a gradient in every synchronised backward.
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  nn::Module& module() const { return *module_; }

  /// While the returned guard lives, backward only accumulates gradients locally (the
  /// first micro-batches of gradient accumulation); the next backward outside it averages
  /// the accumulated gradients.
  class NoSync {
   public:
    explicit NoSync(std::shared_ptr<detail::Reducer> r);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    std::shared_ptr<detail::Reducer> r_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() const;
  /// The switch no_sync() turns off for its scope (PyTorch's require_backward_grad_sync).
  void set_require_sync(bool on) const;

  /// The number of buckets; how long the last synchronised backward waited for the
  /// all-reduces after its last gradient (communication not hidden, plus waiting for the
  /// slowest rank); and the fraction of its buckets' all-reduce time (launch to seen
  /// complete) that passed while backward was still computing.
  size_t num_buckets() const;
  double last_wait_seconds() const;
  double last_overlap_fraction() const;

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<detail::Reducer> reducer_;
  bool broadcast_buffers_;
};

}  // namespace kiln::dist
