// Dataset's default batching (get() per index, then one copy per example) and
// TensorDataset's gather fast path (memcpy per run of consecutive rows, fused dtype
// conversion and scaling for compactly stored uint8 images).
#include "kiln/data/dataset.h"
#include <cmath>
#include <cstring>
#include <numeric>
#include "kiln/core/error.h"
#include "kiln/data/rng.h"

namespace kiln::data {

const char* split_name(Split s) { return s == Split::Train ? "train" : "test"; }

Batch Dataset::get_batch(std::span<const int64_t> indices) const {
  std::vector<Example> ex;
  ex.reserve(indices.size());
  const int64_t n = size();
  for (int64_t i : indices) {
    KILN_CHECK(i >= 0 && i < n, "Dataset::get_batch: index ", i, " out of range for a dataset of size ", n);
    ex.push_back(get(i));
  }
  return stack_examples(ex, indices);
}

namespace {
// Copies one example's tensor (contiguous view of it) into row b of out.
void put_row(const Tensor& out, int64_t b, const Tensor& t) {
  Tensor c = t.detach().contiguous();
  const size_t bytes = size_t(c.numel()) * c.element_size();
  if (bytes) std::memcpy(static_cast<char*>(out.raw_data()) + size_t(b) * bytes, c.raw_data(), bytes);
}

Tensor stack_field(const std::vector<Example>& ex, bool input, std::span<const int64_t> indices) {
  const char* field = input ? "input" : "target";
  auto at = [&](size_t k) -> const Tensor& { return input ? ex[k].input : ex[k].target; };
  auto name = [&](size_t k) { return k < indices.size() ? indices[k] : int64_t(k); };
  const Tensor& first = at(0);
  KILN_CHECK(first.defined(), "stack_examples: example ", name(0), " has an undefined ", field);
  Shape shape = first.shape();
  shape.insert(shape.begin(), int64_t(ex.size()));
  for (size_t k = 0; k < ex.size(); ++k) {
    const Tensor& t = at(k);
    KILN_CHECK(t.defined(), "stack_examples: example ", name(k), " has an undefined ", field);
    KILN_CHECK(t.is_cpu(), "stack_examples: example ", name(k), " ", field, " is on ", t.device().str(),
               "; datasets must return CPU tensors");
    KILN_CHECK(t.shape() == first.shape() && t.dtype() == first.dtype(), "stack_examples: example ",
               name(k), " ", field, " has shape ", shape_str(t.shape()), " and dtype ", dtype_name(t.dtype()),
               " but example ", name(0), " has shape ", shape_str(first.shape()), " and dtype ",
               dtype_name(first.dtype()), "; all examples of a batch must match");
  }
  Tensor out = Tensor::empty(shape, first.dtype());
  for (size_t k = 0; k < ex.size(); ++k) put_row(out, int64_t(k), at(k));
  return out;
}
}  // namespace

Batch stack_examples(const std::vector<Example>& examples, std::span<const int64_t> indices) {
  KILN_CHECK(!examples.empty(), "stack_examples: no examples to stack");
  Batch b;
  b.input = stack_field(examples, true, indices);
  b.target = stack_field(examples, false, indices);
  b.indices.assign(indices.begin(), indices.end());
  return b;
}

// ---------------------------------------------------------------- TensorDataset

TensorDataset::TensorDataset(Tensor inputs, Tensor targets, TensorDatasetOptions options) {
  reset(std::move(inputs), std::move(targets), options, "TensorDataset");
}

void TensorDataset::reset(Tensor inputs, Tensor targets, TensorDatasetOptions options, const char* who) {
  KILN_CHECK(inputs.defined() && targets.defined(), who, ": inputs and targets must be defined tensors");
  KILN_CHECK(inputs.is_cpu() && targets.is_cpu(), who, ": inputs (", inputs.device().str(), ") and targets (",
             targets.device().str(), ") must be on the CPU; move batches to the GPU in the training loop");
  KILN_CHECK(inputs.dim() >= 1 && targets.dim() >= 1, who, ": inputs ", shape_str(inputs.shape()),
             " and targets ", shape_str(targets.shape()), " need a first (example) dimension");
  KILN_CHECK(inputs.size(0) == targets.size(0), who, ": inputs ", shape_str(inputs.shape()), " have ",
             inputs.size(0), " examples but targets ", shape_str(targets.shape()), " have ", targets.size(0));
  DType out = options.input_dtype.value_or(inputs.dtype());
  const bool convert = out != inputs.dtype() || options.input_scale != 1.0;
  if (convert) {
    KILN_CHECK(out == DType::float32 || out == DType::float64, who, ": inputs can be converted to float32 "
               "or float64 (and scaled only then), got input_dtype ", dtype_name(out));
    DType s = inputs.dtype();
    KILN_CHECK(s == DType::float32 || s == DType::float64 || s == DType::int64 || s == DType::int32 ||
                   s == DType::uint8, who, ": cannot convert stored inputs of dtype ", dtype_name(s));
  }
  inputs_ = inputs.detach().contiguous();
  targets_ = targets.detach().contiguous();
  options_ = options;
  n_ = inputs_.size(0);
}

DType TensorDataset::input_dtype() const { return options_.input_dtype.value_or(inputs_.dtype()); }

namespace {
// Copies rows idx[k] of src (row_bytes each) to rows k of dst, one memcpy per run of
// consecutive indices.
void gather_bytes(char* dst, const char* src, size_t row_bytes, std::span<const int64_t> idx) {
  const size_t B = idx.size();
  for (size_t i = 0; i < B;) {
    size_t j = i + 1;
    while (j < B && idx[j] == idx[j - 1] + 1) ++j;
    std::memcpy(dst + i * row_bytes, src + size_t(idx[i]) * row_bytes, (j - i) * row_bytes);
    i = j;
  }
}

template <class D, class S>
void gather_convert(D* dst, const S* src, int64_t row, double scale, std::span<const int64_t> idx) {
  const D sc = D(scale);
  for (size_t k = 0; k < idx.size(); ++k) {
    const S* s = src + idx[k] * row;
    D* d = dst + int64_t(k) * row;
    for (int64_t e = 0; e < row; ++e) d[e] = D(s[e]) * sc;
  }
}
}  // namespace

Batch TensorDataset::get_batch(std::span<const int64_t> indices) const {
  KILN_CHECK(inputs_.defined(), "TensorDataset::get_batch: the dataset is empty (default-constructed)");
  for (int64_t i : indices)
    KILN_CHECK(i >= 0 && i < n_, "TensorDataset::get_batch: index ", i, " out of range for a dataset of size ", n_);
  const int64_t B = int64_t(indices.size());
  Shape ishape = inputs_.shape(), tshape = targets_.shape();
  ishape[0] = B;
  tshape[0] = B;
  const DType out_dt = input_dtype();
  Batch b;
  b.input = Tensor::empty(ishape, out_dt);
  b.target = Tensor::empty(tshape, targets_.dtype());
  b.indices.assign(indices.begin(), indices.end());
  const int64_t irow = n_ ? inputs_.numel() / n_ : 0, trow = n_ ? targets_.numel() / n_ : 0;
  gather_bytes(static_cast<char*>(b.target.raw_data()), static_cast<const char*>(targets_.raw_data()),
               size_t(trow) * targets_.element_size(), indices);
  if (out_dt == inputs_.dtype() && options_.input_scale == 1.0) {
    gather_bytes(static_cast<char*>(b.input.raw_data()), static_cast<const char*>(inputs_.raw_data()),
                 size_t(irow) * inputs_.element_size(), indices);
  } else {
    KILN_DISPATCH_FLOATING(out_dt, "TensorDataset", [&]<class D>() {
      KILN_DISPATCH_NUMERIC(inputs_.dtype(), "TensorDataset", [&]<class S>() {
        gather_convert<D, S>(static_cast<D*>(b.input.raw_data()), static_cast<const S*>(inputs_.raw_data()),
                             irow, options_.input_scale, indices);
      });
    });
  }
  return b;
}

Example TensorDataset::get(int64_t i) const {
  KILN_CHECK(i >= 0 && i < n_, "TensorDataset::get: index ", i, " out of range for a dataset of size ", n_);
  const int64_t idx[1] = {i};
  Batch b = get_batch(idx);
  // drop the batch dim of the one-row batch (a view, no copy)
  Shape is(b.input.shape().begin() + 1, b.input.shape().end());
  Shape ts(b.target.shape().begin() + 1, b.target.shape().end());
  return {b.input.reshape(is), b.target.reshape(ts)};
}

// ---------------------------------------------------------------- Subset, random_split

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  KILN_CHECK(dataset_ != nullptr, "Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (size_t k = 0; k < indices_.size(); ++k)
    KILN_CHECK(indices_[k] >= 0 && indices_[k] < n, "Subset: index ", indices_[k], " (entry ", k,
               ") is out of range for a dataset of size ", n);
}

Example Subset::get(int64_t i) const {
  KILN_CHECK(i >= 0 && i < size(), "Subset::get: index ", i, " out of range for a subset of size ", size());
  return dataset_->get(indices_[size_t(i)]);
}

Batch Subset::get_batch(std::span<const int64_t> indices) const {
  std::vector<int64_t> mapped(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    KILN_CHECK(indices[k] >= 0 && indices[k] < size(), "Subset::get_batch: index ", indices[k],
               " out of range for a subset of size ", size());
    mapped[k] = indices_[size_t(indices[k])];
  }
  Batch b = dataset_->get_batch(mapped);
  b.indices.assign(indices.begin(), indices.end());  // this subset's indices, not the dataset's
  return b;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths, uint64_t seed) {
  KILN_CHECK(dataset != nullptr, "random_split: the dataset is null");
  KILN_CHECK(!lengths.empty(), "random_split: no lengths given");
  const int64_t n = dataset->size();
  double total = 0;
  for (double l : lengths) {
    KILN_CHECK(std::isfinite(l) && l >= 0, "random_split: lengths must be finite and >= 0, got ", l);
    total += l;
  }
  std::vector<int64_t> sizes;
  if (std::abs(total - 1.0) < 1e-9 && total <= 1.0 + 1e-9) {  // fractions, as PyTorch reads them
    int64_t used = 0;
    for (double f : lengths) {
      sizes.push_back(int64_t(std::floor(double(n) * f)));
      used += sizes.back();
    }
    for (size_t k = 0; used < n; k = (k + 1) % sizes.size(), ++used) ++sizes[k];
  } else {
    for (double l : lengths) {
      KILN_CHECK(l == std::floor(l), "random_split: lengths must be whole sizes or fractions summing to 1, got ", l);
      sizes.push_back(int64_t(l));
    }
    KILN_CHECK(int64_t(total) == n, "random_split: the lengths sum to ", int64_t(total), " but the dataset has ", n,
               " examples (give sizes summing to it, or fractions summing to 1)");
  }
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  Rng rng(seed, 0x5b17);
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[rng.below(uint64_t(i + 1))]);  // Fisher-Yates
  std::vector<std::shared_ptr<Subset>> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(std::make_shared<Subset>(dataset, std::vector<int64_t>(perm.begin() + start, perm.begin() + start + s)));
    start += s;
  }
  return parts;
}

}  // namespace kiln::data
