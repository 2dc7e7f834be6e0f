// Joining, splitting and indexing: cat, stack, split/chunk, index_select, gather, pad, one_hot,
// and rearranging: tril/triu, flip, roll, repeat.
#pragma once
#include <vector>
#include "kiln/core/tensor.h"

namespace kiln {

/// Joins along dim; the result dtype promotes all inputs. As in PyTorch, 1-D tensors of shape
/// [0] are skipped beside others (so `acc = cat({acc, x})` may start from an empty acc).
Tensor cat(const std::vector<Tensor>& ts, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& ts, int64_t dim = 0);
/// Pieces of size split_size along dim (the last may be smaller); views of x.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
/// Pieces with the given sizes along dim (must sum to x.size(dim)).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
/// `chunks` pieces of equal size (the last may be smaller).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
/// Entries of x along dim at the (1-D, int64/int32) indices.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// out[i][j][k] = x[i][index[i][j][k]][k] for dim = 1 (torch.gather).
/// A 0-dim input or index counts as 1-D (torch.gather(scalar, 0, index) repeats it).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// Out-of-place scatters (torch.scatter, Tensor.index_add and friends): each returns a copy
/// of x with src's entries written at the index. scatter: out[p with p[dim] = index[p]] =
/// src[p] for every position p of the index (as many dims as x and src, no larger than src,
/// nor than x off dim); of duplicate positions the last one along dim wins (PyTorch leaves it
/// unspecified). The value form writes one number. scatter_add adds instead (duplicates
/// summed in order, deterministic). index_add: out.select(dim, index[k]) += alpha *
/// source.select(dim, k); index_copy writes and index_fill fills those slices (a 0-D or 1-D
/// index). Differentiable in x and the source (PyTorch's gradients: zero where x was
/// overwritten; the source's gathered at the index). 16-bit sums run in float32 on the CPU.
/// Integer tensors are scattered and added exactly (wrapping on overflow).
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, double value);
/// The positions of x's nonzero entries, (count, x.dim()) int64 in row-major order
/// (torch.nonzero / argwhere). The count sets the shape, so a GPU tensor is read back.
Tensor nonzero(const Tensor& x);
/// x's entries where the bool mask (broadcast with x) is true, 1-D in row-major order
/// (torch.masked_select; differentiable in x). Reads the mask back, as nonzero.
Tensor masked_select(const Tensor& x, const Tensor& mask);
/// Constant padding (PyTorch's F.pad, mode "constant"): pads = {left, right} for the last
/// dim, then {top, bottom} for the one before, and so on (at most x.dim() pairs); a
/// negative amount crops. Differentiable (cat of the input with filled blocks).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);
/// F.pad's other modes: reflect (mirror without repeating the edge; each amount below the
/// dim's size), replicate (repeat the edge; the dim must not be empty), circular (wrap
/// around; at most the size left after cropping: beyond it PyTorch reads its own unfilled
/// output). Amounts as above, any number of trailing dims (PyTorch takes 1 to 3 of a 2-D to
/// 5-D input); a negative amount crops, with PyTorch's results; reflect and replicate may not
/// leave a dim empty. Differentiable (index_select along each padded dim).
enum class PadMode { constant, reflect, replicate, circular };
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value = 0.0);
/// int64 one-hot encoding of int64 class indices: shape (..., num_classes), 1 at each index.
/// num_classes -1 takes max(indices) + 1 (a read back to the host). An index outside
/// [0, num_classes) is an error naming it (also a read back).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

/// The lower (tril) or upper (triu) triangle of the last two dims, the rest zeroed: entries
/// with col - row <= diagonal (tril) or >= diagonal (triu) are kept (torch.tril / torch.triu).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
/// x reversed along each of dims (torch.flip).
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
/// x shifted along dims with wrap-around: out[(i + shift) mod n] = x[i] (torch.roll); with no
/// dims, over the flattened tensor (one shift).
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {});
/// x tiled repeats[i] times along each dim (torch.Tensor.repeat); repeats may have more
/// entries than x has dims (leading dims of size 1 are added).
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats);
/// Moves dims `source` to positions `destination`, the others keeping their order (torch.movedim).
Tensor movedim(const Tensor& x, const std::vector<int64_t>& source, const std::vector<int64_t>& destination);
Tensor movedim(const Tensor& x, int64_t source, int64_t destination);
/// The slices of x along dim, each without that dim (torch.unbind): views.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
/// 2-D x: its k-th diagonal (1-D; k > 0 above, k < 0 below the main one). 1-D x: the square
/// matrix with x on its k-th diagonal and zeros elsewhere (torch.diag).
Tensor diag(const Tensor& x, int64_t k = 0);
enum class MeshIndexing { ij, xy };
/// Coordinate grids from 1-D tensors (torch.meshgrid): with ij, output i varies along dim i;
/// with xy (NumPy's), the first two dims swap. Expanded views: write to a clone.
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, MeshIndexing indexing = MeshIndexing::ij);
/// The n-th forward difference along dim, x[1:] - x[:-1] repeated n times, with optional
/// tensors joined before and after along dim first (torch.diff).
Tensor diff(const Tensor& x, int64_t n = 1, int64_t dim = -1, const Tensor& prepend = {}, const Tensor& append = {});

}  // namespace kiln
