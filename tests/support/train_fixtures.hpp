// The training fixtures (tests/data/train.json, written by tools/reference/make_train_fixtures.py).
#pragma once

#include "support/nn_fixtures.hpp"

namespace eftest {

inline const json& train_case(const std::string& name) {
  static const json file = load_fixture("train.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("train.json: no case named " + name);
}

inline std::vector<std::string> train_cases_of_kind(const std::string& kind) {
  static const json file = load_fixture("train.json");
  std::vector<std::string> names;
  for (const auto& c : file.at("cases"))
    if (c.at("kind") == kind) names.push_back(c.at("name").get<std::string>());
  return names;
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
