// Course chapter 1 (docs/course/01-tensors.md): a tensor is a storage plus a shape,
// strides and an offset. Views share the storage; broadcasting stretches size-1 dims
// without copying; the dtype decides how numbers round.
#include <cstdio>
#include <map>
#include <string>
#include <kiln/kiln.h>

using kiln::Tensor;

// One line per tensor; storages are named A, B, ... in the order they are first seen, so
// views of one storage show the same letter.
static void show(const char* name, const Tensor& t) {
  static std::map<const void*, char> names;
  const void* s = t.storage().get();
  if (!names.count(s)) names[s] = char('A' + names.size());
  std::printf("%-12s shape %-7s strides %-7s offset %lld  contiguous %-3s  storage %c\n", name,
              kiln::shape_str(t.shape()).c_str(), kiln::shape_str(t.strides()).c_str(), (long long)t.offset(),
              t.is_contiguous() ? "yes" : "no", names[s]);
}

int main() {
  // 1. storage, shape, strides: element (i, j) of a row-major (2, 3) tensor is at i * 3 + j
  Tensor a = kiln::arange(0.0, 6.0, 1.0).reshape({2, 3});
  std::printf("a =\n%s\n", a.str().c_str());
  show("a", a);

  // 2. views: transpose swaps strides, narrow and select move the offset; no data is copied
  Tensor at = a.transpose(0, 1), row = a.select(0, 1), cols = a.narrow(1, 1, 2);
  show("a.T", at);
  show("a[1]", row);
  show("a[:, 1:3]", cols);
  {
    kiln::NoGradGuard ng;
    row.fill_(-1.0);  // writing through a view changes a
  }
  std::printf("after a[1].fill_(-1): a =\n%s\n", a.str().c_str());
  Tensor c = at.contiguous();  // a copy in the transposed order
  show("a.T.contig", c);

  // 3. broadcasting: (3, 1) + (1, 4) -> (3, 4); the size-1 dims get stride 0
  Tensor col = kiln::arange(0.0, 3.0, 1.0).reshape({3, 1}), line = kiln::arange(0.0, 40.0, 10.0).reshape({1, 4});
  show("col.expand", col.expand({3, 4}));
  std::printf("col + line =\n%s\n", kiln::add(col, line).str().c_str());

  // 4. dtypes: the same numbers in float64, float32, bfloat16 and float16
  for (kiln::DType dt : {kiln::DType::float64, kiln::DType::float32, kiln::DType::bfloat16, kiln::DType::float16}) {
    Tensor x = kiln::full({}, 0.1, {.dtype = dt}), y = kiln::full({}, 0.2, {.dtype = dt});
    std::printf("%-8s 0.1 + 0.2 = %.17g   1/3 = %.17g\n", kiln::dtype_name(dt), kiln::add(x, y).item(),
                kiln::div(kiln::full({}, 1.0, {.dtype = dt}), kiln::full({}, 3.0, {.dtype = dt})).item());
  }
  return 0;
}
