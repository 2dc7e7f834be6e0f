// DistributedDataParallel (see ddp.h): the Reducer owns the buckets and the hooks.
#include "kiln/dist/ddp.h"
#include <chrono>
#include <unordered_map>
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/dist/dist.h"
#define XXH_INLINE_ALL  // header-only use of Debian's xxHash (a 64-bit hash of the model's signature)
#include <xxhash.h>

namespace kiln::dist {

namespace detail {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Bucket {
  std::vector<Tensor> params;   // in the order their gradients are expected
  std::vector<int64_t> offsets; // element offset of each in `flat`
  Tensor flat;                  // the bucket's gradients, back to back
  size_t ready = 0;             // gradients accumulated in this backward
  Work work;
  bool launched = false;
  double launched_at = 0, done_at = -1;  // when its all-reduce started and was seen complete
  void poll() {  // gives MPI a chance to progress it, and notes when it is complete
    if (done_at < 0 && work.done()) done_at = now_s();
  }
};

struct Reducer {
  std::vector<Bucket> buckets;
  std::unordered_map<TensorImpl*, std::pair<size_t, size_t>> where;  // parameter -> (bucket, index)
  std::vector<std::vector<bool>> marked;                             // per bucket, per parameter
  std::vector<std::pair<Tensor, int64_t>> hooks;
  std::vector<std::string> names;                                    // per parameter, for errors
  std::unordered_map<TensorImpl*, std::string> name_of;
  bool sync = true;
  size_t launched = 0;
  double wait_seconds = 0;
  double overlap = 0;  // of the last synchronised backward, see last_overlap_fraction()
  double last_grad_at = 0;  // when the latest gradient was accumulated

  ~Reducer() {
    for (auto& [p, id] : hooks) p.remove_hook(id);
    try {
      forget_backward();  // no reduction in flight may write into the buckets once they are freed
    } catch (const std::exception&) {
    }
  }

  /// Waits for the buckets in flight and forgets the current backward's gradients.
  void forget_backward() {
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].launched) buckets[b].work.wait();
      buckets[b].ready = 0;
      buckets[b].launched = false;
      std::fill(marked[b].begin(), marked[b].end(), false);
    }
    launched = 0;
  }

  void on_ready(const Tensor& p) {
    if (!sync) return;
    last_grad_at = now_s();
    const auto [b, i] = where.at(p.impl_ptr().get());
    KILN_CHECK(!marked[b][i], "DistributedDataParallel: parameter '", name_of.at(p.impl_ptr().get()),
               "' got its gradient twice in one backward (is it used inside and outside a checkpointed block?)");
    marked[b][i] = true;
    Bucket& bk = buckets[b];
    if (++bk.ready == bk.params.size()) launch(bk);
    for (Bucket& other : buckets)  // give MPI a chance to progress the ones in flight
      if (other.launched) other.poll();
    if (launched == buckets.size()) finish();
  }

  void launch(Bucket& bk) {
    NoGradGuard ng;
    for (size_t i = 0; i < bk.params.size(); ++i) {
      const Tensor g = bk.params[i].grad();
      bk.flat.narrow(0, bk.offsets[i], g.numel()).copy_(g.reshape({-1}));
    }
    bk.launched_at = now_s();
    bk.done_at = -1;
    bk.work = all_reduce_async(bk.flat, ReduceOp::avg);
    bk.launched = true;
    ++launched;
  }

  void finish() {  // every bucket is in flight: wait, and put the averages into the grads
    NoGradGuard ng;
    const double t0 = now_s();
    double in_flight = 0, hidden = 0;  // hidden: in flight before the last gradient came in
    for (Bucket& bk : buckets) {
      bk.work.wait();
      if (bk.done_at < 0) bk.done_at = now_s();
      in_flight += bk.done_at - bk.launched_at;
      hidden += std::max(0.0, std::min(bk.done_at, last_grad_at) - bk.launched_at);
    }
    wait_seconds = now_s() - t0;
    overlap = in_flight > 0 ? hidden / in_flight : 0;
    for (Bucket& bk : buckets)
      for (size_t i = 0; i < bk.params.size(); ++i) {
        Tensor g = bk.params[i].grad();
        g.copy_(bk.flat.narrow(0, bk.offsets[i], g.numel()).reshape(g.shape()));
      }
    forget_backward();  // ready for the next one
  }

  /// Before a forward: the previous synchronised backward must have reached every parameter.
  /// (A bucket none of whose parameters got a gradient counts too, when any other did.)
  /// On an error the buckets in flight are waited for and the backward forgotten, so the
  /// wrapper stays usable (and no reduction writes into freed memory).
  void check_complete() {
    bool started = launched > 0;
    for (const Bucket& bk : buckets) started = started || bk.ready > 0;
    if (!started) return;  // no backward since the last complete one
    for (size_t b = 0; b < buckets.size(); ++b)
      for (size_t i = 0; i < buckets[b].params.size(); ++i) {
        if (marked[b][i]) continue;
        const std::string name = name_of.at(buckets[b].params[i].impl_ptr().get());
        forget_backward();
        KILN_FAIL("DistributedDataParallel: parameter '", name, "' got no gradient in the last backward, so its bucket "
                  "was never reduced; every parameter that requires grad must take part in the loss");
      }
  }
};

/// Every rank must hold the same model (PyTorch's constructor checks it too): the names,
/// shapes and dtypes of the parameters and buffers, hashed and gathered, so that a mismatch
/// is an error on every rank, not a truncated broadcast on one and a wait on the others.
void check_same_model(nn::Module& m) {
  if (world_size() == 1) return;
  std::string sig;
  for (const auto& [name, p] : m.named_parameters()) sig += name + shape_str(p.shape()) + dtype_name(p.dtype()) + ";";
  for (const auto& [name, b] : m.named_buffers()) sig += name + shape_str(b.shape()) + dtype_name(b.dtype()) + ";";
  const uint64_t h = XXH3_64bits(sig.data(), sig.size());
  const std::vector<int64_t> all = all_gather(from_vector<int64_t>({int64_t(h)})).to_vector<int64_t>();
  std::vector<int> differ;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0]) differ.push_back(int(r));
  KILN_CHECK(differ.empty(), "DistributedDataParallel: the model differs between ranks (parameter and buffer names, ",
             "shapes or dtypes): rank ", differ.empty() ? 0 : differ[0], " does not match rank 0 (", differ.size(),
             " rank(s) differ); build the same model on every rank");
}

}  // namespace detail

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 DistributedDataParallelOptions o)
    : module_(register_module("module", std::move(module))),
      reducer_(std::make_shared<detail::Reducer>()),
      broadcast_buffers_(o.broadcast_buffers) {
  KILN_CHECK(o.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be > 0, got ", o.bucket_cap_mb);
  if (!is_initialized()) init();
  detail::check_same_model(*module_);
  {  // every rank starts from rank 0's weights and buffers
    NoGradGuard ng;
    for (Tensor& p : module_->parameters()) broadcast(p, 0);
    for (Tensor& b : module_->buffers()) broadcast(b, 0);
  }
  // Buckets in reverse registration order (backward produces the last layers' gradients
  // first); a new bucket when the cap is reached or the dtype or device changes.
  const auto named = module_->named_parameters();
  std::vector<std::pair<std::string, Tensor>> params;
  for (const auto& [name, p] : named)
    if (p.requires_grad()) params.emplace_back(name, p);
  const double cap = o.bucket_cap_mb * 1024 * 1024;
  detail::Reducer& r = *reducer_;
  std::vector<std::vector<Tensor>> groups;
  double bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const Tensor& p = it->second;
    const bool fresh = groups.empty() || bytes >= cap || groups.back().back().dtype() != p.dtype() ||
                       groups.back().back().device() != p.device();
    if (fresh) groups.emplace_back(), bytes = 0;
    groups.back().push_back(p);
    bytes += double(p.numel()) * double(p.element_size());
    r.name_of[p.impl_ptr().get()] = it->first;
  }
  for (auto& g : groups) {
    detail::Bucket bk;
    int64_t n = 0;
    for (const Tensor& p : g) {
      r.where[p.impl_ptr().get()] = {r.buckets.size(), bk.params.size()};
      bk.params.push_back(p);
      bk.offsets.push_back(n);
      n += p.numel();
    }
    bk.flat = Tensor::empty({n}, g[0].dtype(), g[0].device());
    r.marked.emplace_back(g.size(), false);
    r.buckets.push_back(std::move(bk));
  }
  detail::Reducer* raw = reducer_.get();  // the reducer removes the hooks when it dies
  for (const auto& [name, p] : params)
    r.hooks.emplace_back(p, p.register_post_accumulate_grad_hook([raw](const Tensor& leaf) { raw->on_ready(leaf); }));
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  reducer_->check_complete();
  if (broadcast_buffers_ && world_size() > 1) {
    NoGradGuard ng;
    for (Tensor& b : module_->buffers()) broadcast(b, 0);
  }
  return (*module_)(x);
}

DistributedDataParallel::NoSync::NoSync(std::shared_ptr<detail::Reducer> r) : r_(std::move(r)), prev_(r_->sync) {
  r_->sync = false;
}
DistributedDataParallel::NoSync::~NoSync() { r_->sync = prev_; }

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() const { return NoSync(reducer_); }
void DistributedDataParallel::set_require_sync(bool on) const { reducer_->sync = on; }

size_t DistributedDataParallel::num_buckets() const { return reducer_->buckets.size(); }
double DistributedDataParallel::last_wait_seconds() const { return reducer_->wait_seconds; }
double DistributedDataParallel::last_overlap_fraction() const { return reducer_->overlap; }

}  // namespace kiln::dist
