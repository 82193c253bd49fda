// Tensor<T, Rank>: an n-dimensional array with PyTorch's layout and handle semantics.
//
// Storage is contiguous row-major and 64-byte aligned when a tensor owns it; views (transpose, slice,
// select, reshape of contiguous data, ...) share the storage and differ only in shape, strides and offset.
// Copying a Tensor copies the handle, as in libtorch: both names see the same elements. `clone()` copies
// the elements. The rank is a template parameter so rank mistakes are compile errors and index loops unroll.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "eigenformer/tensor/shape.hpp"
#include "eigenformer/tensor/storage.hpp"

namespace eigenformer {

template <typename T, std::size_t Rank>
class Tensor;

namespace detail {

// `std::initializer_list` nested Rank deep, so `Tensor<float, 2>{{1, 2}, {3, 4}}` reads like torch.tensor.
template <typename T, std::size_t Rank>
struct nested_list {
  using type = std::initializer_list<typename nested_list<T, Rank - 1>::type>;
};
template <typename T>
struct nested_list<T, 0> {
  using type = T;
};
template <typename T, std::size_t Rank>
using nested_list_t = typename nested_list<T, Rank>::type;
struct rank0_no_list {
  explicit rank0_no_list() = default;
};

template <typename T, std::size_t Rank, std::size_t Depth = 0>
void nested_shape(const nested_list_t<T, Rank - Depth>& list, Shape<Rank>& shape, bool& seen) {
  if (!seen) shape[Depth] = static_cast<index_t>(list.size());
  if (static_cast<index_t>(list.size()) != shape[Depth]) {
    throw shape_error("tensor: nested initializer lists are ragged at depth " + std::to_string(Depth) +
                      " (" + std::to_string(list.size()) + " vs " + std::to_string(shape[Depth]) + ")");
  }
  if constexpr (Depth + 1 < Rank) {
    if (list.size() == 0 && !seen) {
      // The first list reached is empty: the deeper dims are 0 and the shape is now fixed, so a later
      // non-empty sibling is ragged rather than a new shape.
      for (std::size_t d = Depth + 1; d < Rank; ++d) shape[d] = 0;
      seen = true;
    }
    for (const auto& sub : list) nested_shape<T, Rank, Depth + 1>(sub, shape, seen);
  } else {
    seen = true;
  }
}

template <typename T, std::size_t Rank, std::size_t Depth = 0>
void nested_copy(const nested_list_t<T, Rank - Depth>& list, T*& out) {
  if constexpr (Depth + 1 < Rank) {
    for (const auto& sub : list) nested_copy<T, Rank, Depth + 1>(sub, out);
  } else {
    for (const auto& v : list) *out++ = v;
  }
}

// Calls f(offsets) once per row of the innermost dim, where offsets[k] is the element offset of operand k
// at the start of that row; the caller walks the row with the operands' innermost strides. Rows are
// visited in row-major order, which is the order PyTorch's serial kernels (and random draws) use.
template <std::size_t R, std::size_t N, class F>
void for_each_row(const Shape<R>& shape, const std::array<Shape<R>, N>& strides, F&& f) {
  std::array<index_t, N> off{};
  if constexpr (R <= 1) {
    if (detail::numel_of(shape) > 0) f(off);
  } else {
    for (auto d : shape)
      if (d == 0) return;
    Shape<R> idx{};
    while (true) {
      f(off);
      std::size_t d = R - 1;  // advance the odometer over dims [0, R-1)
      while (d-- > 0) {
        ++idx[d];
        for (std::size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        if (idx[d] < shape[d]) break;
        for (std::size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * shape[d];
        idx[d] = 0;
        if (d == 0) return;
      }
    }
  }
}

template <std::size_t R>
index_t inner_size(const Shape<R>& shape) {
  if constexpr (R == 0) return 1;
  else return shape[R - 1];
}
template <std::size_t R>
index_t inner_stride(const Shape<R>& strides) {
  if constexpr (R == 0) return 0;
  else return strides[R - 1];
}

}  // namespace detail

template <typename T, std::size_t Rank>
class Tensor {
  static_assert(tensor_element<T>, "eigenformer::Tensor holds float, double, std::int64_t or bool elements");

 public:
  using value_type = T;
  static constexpr std::size_t rank = Rank;

  // An empty tensor: every dim 0 (rank 0: one element, 0).
  Tensor() : Tensor(uninitialized(Shape<Rank>{})) { fill_(T{}); }

  // There is deliberately no constructor from a shape: braces always hold values, so `Tensor<float, 1>({5})`
  // is the one value 5 and `Tensor<float, 2>({2, 3})` does not compile. Shapes go through
  // zeros/ones/full/empty (`ef::zeros<float>({2, 3})`), which say what the new elements are.

  // From nested braces, like torch.tensor: `Tensor<float, 2>{{1, 2, 3}, {4, 5, 6}}`.
  // (For rank 0 the parameter type is a tag nobody can name, so `Tensor<float, 0>(x)` means only the
  // value constructor below.)
  Tensor(std::conditional_t<(Rank > 0), detail::nested_list_t<T, Rank>, detail::rank0_no_list> values)
    requires(Rank > 0)
  {
    Shape<Rank> shape{};
    bool seen = false;
    detail::nested_shape<T, Rank>(values, shape, seen);
    *this = uninitialized(shape);
    T* out = data_;
    detail::nested_copy<T, Rank>(values, out);
  }

  // A 0-d tensor holding `value`, like torch.tensor(3.5).
  explicit Tensor(T value)
    requires(Rank == 0)
      : Tensor(uninitialized(Shape<0>{})) {
    *data_ = value;
  }

  // Uninitialised storage of the given shape (torch.empty).
  static Tensor empty(const Shape<Rank>& shape) { return uninitialized(shape); }

  // A view onto existing storage; used by views and by code that maps external buffers.
  Tensor(std::shared_ptr<T[]> storage, T* data, const Shape<Rank>& shape, const Shape<Rank>& strides)
      : storage_(std::move(storage)), data_(data), shape_(shape), strides_(strides) {}

  // ---- shape -------------------------------------------------------------------------------------------
  const Shape<Rank>& shape() const noexcept { return shape_; }
  const Shape<Rank>& strides() const noexcept { return strides_; }
  index_t size(index_t dim) const { return shape_[detail::normalize_dim("size", dim, Rank)]; }
  index_t stride(index_t dim) const { return strides_[detail::normalize_dim("stride", dim, Rank)]; }
  static constexpr std::size_t dim() noexcept { return Rank; }
  index_t numel() const noexcept { return detail::numel_of(shape_); }
  bool is_contiguous() const noexcept {
    index_t expected = 1;
    for (std::size_t i = Rank; i-- > 0;) {
      if (shape_[i] != 1 && strides_[i] != expected) return false;
      expected *= shape_[i];
    }
    return true;
  }
  // True when this tensor and `other` may see the same elements (same storage).
  template <std::size_t R2>
  bool shares_storage_with(const Tensor<T, R2>& other) const noexcept {
    return storage_ == other.storage();
  }

  // ---- element access ----------------------------------------------------------------------------------
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  const std::shared_ptr<T[]>& storage() const noexcept { return storage_; }

  // Unchecked access (asserts in debug builds), as in Eigen's operator().
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  T& operator()(I... idx) {
    return data_[offset_of({static_cast<index_t>(idx)...})];
  }
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  const T& operator()(I... idx) const {
    return data_[offset_of({static_cast<index_t>(idx)...})];
  }

  // Checked access: throws std::out_of_range naming the index and the shape. Negative indices count
  // from the end, as in Python.
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  T& at(I... idx) {
    return data_[checked_offset({static_cast<index_t>(idx)...})];
  }
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  const T& at(I... idx) const {
    return data_[checked_offset({static_cast<index_t>(idx)...})];
  }

  // The single element of a one-element tensor (Tensor.item()).
  T item() const {
    if (numel() != 1)
      throw shape_error("item: tensor of shape " + shape_string(shape_) + " has " + std::to_string(numel()) +
                        " elements, expected exactly 1");
    Shape<Rank> zero{};
    return data_[offset_of(zero)];
  }

  // Elements in row-major order, whatever the strides.
  std::vector<T> to_vector() const {
    std::vector<T> out;
    out.reserve(static_cast<std::size_t>(numel()));
    for_each_value([&](const T& v) { out.push_back(v); });
    return out;
  }

  // ---- copies and fills --------------------------------------------------------------------------------
  Tensor clone() const {
    Tensor out = uninitialized(shape_);
    copy_strided(*this, out.data_);
    return out;
  }
  // This tensor if already contiguous (no copy), else a contiguous copy.
  Tensor contiguous() const { return is_contiguous() ? *this : clone(); }

  Tensor& fill_(T value) {
    if (is_contiguous()) {
      std::fill_n(data_, numel(), value);
    } else {
      detail::for_each_row<Rank, 1>(shape_, {strides_}, [&](const std::array<index_t, 1>& off) {
        const index_t n = detail::inner_size(shape_), s = detail::inner_stride(strides_);
        for (index_t i = 0; i < n; ++i) data_[off[0] + i * s] = value;
      });
    }
    return *this;
  }
  Tensor& zero_() { return fill_(T{}); }

  // Copies `src` into this tensor's elements (in place, through views), broadcasting src to this shape.
  template <std::size_t R2>
  Tensor& copy_(const Tensor<T, R2>& src) {
    static_assert(R2 <= Rank, "copy_: the source may not have more dims than the destination");
    const auto b = detail::broadcast_shapes("copy_", shape_, src.shape());
    if (b != shape_)
      throw shape_error("copy_: source of shape " + shape_string(src.shape()) +
                        " does not broadcast to destination shape " + shape_string(shape_));
    // A source overlapping this tensor is first copied out, so the result never depends on loop order.
    const Tensor<T, R2> s = src.shares_storage_with(*this) ? src.clone() : src;
    const auto ss = detail::broadcast_strides<Rank>(s.shape(), s.strides());
    const T* sp = s.data();
    detail::for_each_row<Rank, 2>(shape_, {strides_, ss}, [&](const std::array<index_t, 2>& off) {
      const index_t n = detail::inner_size(shape_), d0 = detail::inner_stride(strides_),
                    d1 = detail::inner_stride(ss);
      for (index_t i = 0; i < n; ++i) data_[off[0] + i * d0] = sp[off[1] + i * d1];
    });
    return *this;
  }

  // Element type conversion (Tensor.to(dtype)); always a fresh contiguous tensor.
  template <typename U>
  Tensor<U, Rank> to() const {
    auto out = Tensor<U, Rank>::empty(shape_);
    U* o = out.data();
    for_each_value([&](const T& v) { *o++ = static_cast<U>(v); });
    return out;
  }

  // ---- views (no copy) ---------------------------------------------------------------------------------
  // Same elements under a new shape; one dim may be -1 (inferred). Requires contiguous data (else use
  // reshape), exactly like Tensor.view.
  template <std::size_t N>
  Tensor<T, N> view(const index_t (&dims)[N]) const {
    Shape<N> s{};
    std::copy(dims, dims + N, s.begin());
    return view(s);
  }
  template <std::size_t N>
  Tensor<T, N> view(Shape<N> dims) const {
    dims = infer_shape("view", dims);
    if (!is_contiguous())
      throw shape_error("view: tensor of shape " + shape_string(shape_) +
                        " is not contiguous; use reshape (which copies) or contiguous() first");
    return Tensor<T, N>(storage_, data_, dims, detail::contiguous_strides(dims));
  }
  // Like view, but copies when the data is not contiguous (Tensor.reshape).
  template <std::size_t N>
  Tensor<T, N> reshape(const index_t (&dims)[N]) const {
    Shape<N> s{};
    std::copy(dims, dims + N, s.begin());
    return reshape(s);
  }
  template <std::size_t N>
  Tensor<T, N> reshape(Shape<N> dims) const {
    dims = infer_shape("reshape", dims);
    return contiguous().view(dims);
  }
  Tensor<T, 1> flatten() const { return reshape(Shape<1>{numel()}); }

  // Swaps two dims (Tensor.transpose); `t()` is the rank-2 shorthand.
  Tensor transpose(index_t dim0, index_t dim1) const {
    const auto a = detail::normalize_dim("transpose", dim0, Rank);
    const auto b = detail::normalize_dim("transpose", dim1, Rank);
    Tensor out = *this;
    std::swap(out.shape_[a], out.shape_[b]);
    std::swap(out.strides_[a], out.strides_[b]);
    return out;
  }
  Tensor t() const
    requires(Rank == 2)
  {
    return transpose(0, 1);
  }
  // Reorders dims: out.shape[i] = shape[dims[i]] (Tensor.permute).
  Tensor permute(const Shape<Rank>& dims) const {
    Tensor out = *this;
    std::array<bool, Rank> used{};
    for (std::size_t i = 0; i < Rank; ++i) {
      const auto d = detail::normalize_dim("permute", dims[i], Rank);
      if (used[d]) throw shape_error("permute: dims " + shape_string(dims) + " repeat dim " + std::to_string(d));
      used[d] = true;
      out.shape_[i] = shape_[d];
      out.strides_[i] = strides_[d];
    }
    return out;
  }

  // Elements start, start+step, ... < end along dim (Python's x[..., start:end:step]). Like Python,
  // start and end are clamped to the size and may be negative.
  Tensor slice(index_t dim, index_t start, index_t end, index_t step = 1) const {
    const auto d = detail::normalize_dim("slice", dim, Rank);
    if (step <= 0) throw shape_error("slice: step must be positive, got " + std::to_string(step));
    const index_t n = shape_[d];
    auto clamp = [n](index_t i) { return std::clamp<index_t>(i < 0 ? i + n : i, 0, n); };
    start = clamp(start);
    end = std::max(clamp(end), start);
    Tensor out = *this;
    out.data_ = data_ + start * strides_[d];
    out.shape_[d] = (end - start + step - 1) / step;
    out.strides_[d] = strides_[d] * step;
    return out;
  }
  // `length` elements from `start` along dim (Tensor.narrow); unlike slice, out-of-range is an error.
  Tensor narrow(index_t dim, index_t start, index_t length) const {
    const auto d = detail::normalize_dim("narrow", dim, Rank);
    if (start < 0) start += shape_[d];
    if (start < 0 || length < 0 || start + length > shape_[d])
      throw shape_error("narrow: start " + std::to_string(start) + " + length " + std::to_string(length) +
                        " exceeds size " + std::to_string(shape_[d]) + " of dim " + std::to_string(d) +
                        " in shape " + shape_string(shape_));
    return slice(static_cast<index_t>(d), start, start + length);
  }
  // The sub-tensor at `index` along dim, with that dim removed (Tensor.select, x[:, i]).
  Tensor<T, Rank - 1> select(index_t dim, index_t index) const
    requires(Rank > 0)
  {
    const auto d = detail::normalize_dim("select", dim, Rank);
    if (index < -shape_[d] || index >= shape_[d])
      throw std::out_of_range("select: index " + std::to_string(index) + " is out of range for dim " +
                              std::to_string(d) + " of size " + std::to_string(shape_[d]) + " in shape " +
                              shape_string(shape_));
    if (index < 0) index += shape_[d];
    Shape<Rank - 1> s{}, st{};
    for (std::size_t i = 0, j = 0; i < Rank; ++i) {
      if (i == d) continue;
      s[j] = shape_[i];
      st[j++] = strides_[i];
    }
    return Tensor<T, Rank - 1>(storage_, data_ + index * strides_[d], s, st);
  }
  // Inserts a dim of size 1 at position dim (0..Rank).
  Tensor<T, Rank + 1> unsqueeze(index_t dim) const {
    const auto d = detail::normalize_dim("unsqueeze", dim, Rank + 1);
    Shape<Rank + 1> s{}, st{};
    for (std::size_t i = 0, j = 0; i <= Rank; ++i) {
      if (i == d) {
        s[i] = 1;
        st[i] = (d < Rank ? strides_[d] * shape_[d] : 1);
        continue;
      }
      s[i] = shape_[j];
      st[i] = strides_[j++];
    }
    return Tensor<T, Rank + 1>(storage_, data_, s, st);
  }
  // Removes dim `dim`, which must have size 1.
  Tensor<T, Rank - 1> squeeze(index_t dim) const
    requires(Rank > 0)
  {
    const auto d = detail::normalize_dim("squeeze", dim, Rank);
    if (shape_[d] != 1)
      throw shape_error("squeeze: dim " + std::to_string(d) + " of shape " + shape_string(shape_) +
                        " has size " + std::to_string(shape_[d]) + ", expected 1");
    return select(static_cast<index_t>(d), 0);
  }
  // A read-mostly view of this tensor broadcast to `shape` (stride 0 along expanded dims), Tensor.expand.
  template <std::size_t N>
  Tensor<T, N> expand(const Shape<N>& shape) const {
    static_assert(N >= Rank, "expand: the target shape may not have fewer dims than the tensor");
    const auto b = detail::broadcast_shapes("expand", shape_, shape);
    if (b != shape)
      throw shape_error("expand: shape " + shape_string(shape_) + " cannot be expanded to " + shape_string(shape));
    return Tensor<T, N>(storage_, data_, shape, detail::broadcast_strides<N>(shape_, strides_));
  }

  // Calls f(value) for every element in row-major order.
  template <class F>
  void for_each_value(F&& f) const {
    if (is_contiguous()) {
      const index_t n = numel();
      for (index_t i = 0; i < n; ++i) f(data_[i]);
      return;
    }
    detail::for_each_row<Rank, 1>(shape_, {strides_}, [&](const std::array<index_t, 1>& off) {
      const index_t n = detail::inner_size(shape_), s = detail::inner_stride(strides_);
      for (index_t i = 0; i < n; ++i) f(data_[off[0] + i * s]);
    });
  }

 private:
  template <typename, std::size_t>
  friend class Tensor;

  static Tensor uninitialized(const Shape<Rank>& shape) {
    detail::check_nonnegative_shape("tensor", shape);
    auto storage = detail::allocate<T>(detail::numel_of(shape));
    T* p = storage.get();
    return Tensor(std::move(storage), p, shape, detail::contiguous_strides(shape));
  }

  static void copy_strided(const Tensor& src, T* out) {
    if (src.is_contiguous()) {
      if (src.numel() > 0) std::memcpy(out, src.data_, sizeof(T) * static_cast<std::size_t>(src.numel()));
      return;
    }
    src.for_each_value([&](const T& v) { *out++ = v; });
  }

  index_t offset_of(const Shape<Rank>& idx) const {
    index_t off = 0;
    for (std::size_t i = 0; i < Rank; ++i) {
      assert(idx[i] >= 0 && idx[i] < shape_[i] && "Tensor::operator(): index out of range");
      off += idx[i] * strides_[i];
    }
    return off;
  }

  index_t checked_offset(Shape<Rank> idx) const {
    const Shape<Rank> given = idx;  // for the message: the index as the caller wrote it
    for (std::size_t i = 0; i < Rank; ++i) {
      if (idx[i] < 0) idx[i] += shape_[i];
      if (idx[i] < 0 || idx[i] >= shape_[i]) {
        throw std::out_of_range("at: index " + shape_string(given) + " is out of range for shape " +
                                shape_string(shape_) + " (dim " + std::to_string(i) + ")");
      }
    }
    return offset_of(idx);
  }

  template <std::size_t N>
  Shape<N> infer_shape(const char* op, Shape<N> dims) const {
    index_t known = 1;
    int infer = -1;
    for (std::size_t i = 0; i < N; ++i) {
      if (dims[i] == -1) {
        if (infer >= 0) throw shape_error(std::string(op) + ": only one dim may be -1 in " + shape_string(dims));
        infer = static_cast<int>(i);
      } else if (dims[i] < 0) {
        throw shape_error(std::string(op) + ": negative size in " + shape_string(dims));
      } else {
        known *= dims[i];
      }
    }
    if (infer >= 0 && known != 0 && numel() % known == 0) dims[static_cast<std::size_t>(infer)] = numel() / known;
    if (detail::numel_of(dims) != numel() || (infer >= 0 && known == 0))
      throw shape_error(std::string(op) + ": shape " + shape_string(dims) + " is invalid for a tensor of shape " +
                        shape_string(shape_) + " (" + std::to_string(numel()) + " elements)");
    return dims;
  }

  std::shared_ptr<T[]> storage_;
  T* data_ = nullptr;
  Shape<Rank> shape_{};
  Shape<Rank> strides_{};
};

// Deduction from nested braces is not possible in C++, so `tensor` overloads spell out ranks 1-4:
// `auto x = tensor<float>({{1, 2}, {3, 4}});`. Rank 1 takes a C array rather than an initializer_list so
// that a column such as {{1}, {2}} (whose inner braces also convert to a scalar) resolves to rank 2.
template <typename T, std::size_t N>
Tensor<T, 1> tensor(const T (&v)[N]) {
  auto t = Tensor<T, 1>::empty(Shape<1>{static_cast<index_t>(N)});
  std::copy(v, v + N, t.data());
  return t;
}
template <typename T>
Tensor<T, 2> tensor(detail::nested_list_t<T, 2> v) { return Tensor<T, 2>(v); }
template <typename T>
Tensor<T, 3> tensor(detail::nested_list_t<T, 3> v) { return Tensor<T, 3>(v); }
template <typename T>
Tensor<T, 4> tensor(detail::nested_list_t<T, 4> v) { return Tensor<T, 4>(v); }
template <typename T>
Tensor<T, 0> scalar_tensor(T v) { return Tensor<T, 0>(v); }

}  // namespace eigenformer
