// nn.ModuleList: an indexed sequence of modules of one type, registered as children "0", "1", ... so their
// parameters are named "h.0.attn.c_attn.weight" as in Hugging Face checkpoints. It has no forward: the
// owner decides how the children are chained.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

namespace detail {
template <floating_element T>
T module_element(const Module<T>*);
}  // namespace detail

// The element type T of a class derived from Module<T>.
template <class M>
using module_element_t = decltype(detail::module_element(static_cast<const M*>(nullptr)));

template <class M>
class ModuleList : public Module<module_element_t<M>> {
  using T = module_element_t<M>;

 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<M> modules) : modules_(std::move(modules)) {}

  std::string type_name() const override { return "ModuleList"; }
  void register_members(Members<T>& m) override {
    for (std::size_t i = 0; i < modules_.size(); ++i) m.child(std::to_string(i), modules_[i]);
  }

  // Appended modules keep this list's training mode, as PyTorch's children do only once train() runs
  // again; call train()/eval() on the owner after building.
  template <class... Args>
  M& emplace_back(Args&&... args) {
    return modules_.emplace_back(std::forward<Args>(args)...);
  }
  void push_back(M&& m) { modules_.push_back(std::move(m)); }
  void reserve(std::size_t n) { modules_.reserve(n); }

  std::size_t size() const noexcept { return modules_.size(); }
  bool empty() const noexcept { return modules_.empty(); }
  M& operator[](std::size_t i) { return modules_[i]; }
  const M& operator[](std::size_t i) const { return modules_[i]; }
  M& at(std::size_t i) { return modules_.at(i); }
  const M& at(std::size_t i) const { return modules_.at(i); }
  auto begin() noexcept { return modules_.begin(); }
  auto end() noexcept { return modules_.end(); }
  auto begin() const noexcept { return modules_.begin(); }
  auto end() const noexcept { return modules_.end(); }
  auto rbegin() noexcept { return modules_.rbegin(); }
  auto rend() noexcept { return modules_.rend(); }

 private:
  std::vector<M> modules_;
};

}  // namespace eigenformer::nn
