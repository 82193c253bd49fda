// The training fixtures (tests/data/train.json, written by tools/reference/make_train_fixtures.py).
#pragma once

#include "support/cases.hpp"
#include "support/nn_fixtures.hpp"

namespace eftest {

inline const json& train_file() {
  static const json file = load_fixture("train.json");
  return file;
}

inline const json& train_case(const std::string& name) {
  for (const auto& c : train_file().at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("train.json: no case named " + name);
}

// Runs f(name, case) on every train.json case of `kind`, then checks that it ran as many as the file declares.
template <typename F>
void for_each_train_case(const std::string& kind, F&& f) {
  std::size_t ran = 0;
  for (const auto& c : train_file().at("cases")) {
    if (c.at("kind") != kind) continue;
    f(c.at("name").get<std::string>(), c);
    ++ran;
  }
  check_ran(ran, declared_cases(train_file(), "train.json", "kind", kind), "train.json cases of kind " + kind);
}

// A free-standing parameter appended to `list` under `name`, as Module::named_parameters() would list it
// (flat view of the data, sharing the gradient state).
template <typename T, std::size_t R>
void add_named(ef::nn::ParameterList<T>& list, const std::string& name, ef::nn::Parameter<T, R>& p) {
  list.push_back(ef::nn::NamedParameter<T>{name, std::vector<index_t>(p.shape().begin(), p.shape().end()),
                                           p.data.view(ef::Shape<1>{p.numel()}), p.state(), 0});
}

// An int64 fixture tensor with its recorded rank.
template <std::size_t R>
ef::Tensor<std::int64_t, R> fx_ids(const json& t) {
  REQUIRE(shape_of(t).size() == R);
  ef::Shape<R> shape{};
  for (std::size_t i = 0; i < R; ++i) shape[i] = shape_of(t)[i];
  auto out = ef::Tensor<std::int64_t, R>::empty(shape);
  const auto& data = t.at("data");
  REQUIRE(static_cast<index_t>(data.size()) == out.numel());
  for (std::size_t i = 0; i < data.size(); ++i) out.data()[i] = data[i].get<std::int64_t>();
  return out;
}

}  // namespace eftest
