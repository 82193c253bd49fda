// io/state_dict.hpp: state_dict / load_state_dict / save / load through nn::Linear and
// nn::MultiHeadAttention, PyTorch-style strict errors (missing and unexpected keys, shape mismatches), and
// the rename / transpose hooks that load Hugging Face GPT-2's Conv1D weights into Linear.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include <eigenformer/io/state_dict.hpp>
#include <eigenformer/nn/linear.hpp>
#include <eigenformer/nn/multi_head_attention.hpp>
#include <eigenformer/nn/self_attention.hpp>

#include "io_test_support.hpp"
#include "support/errors.hpp"
#include "support/fixtures.hpp"

using namespace eftest;
namespace io = eigenformer::io;
namespace nn = eigenformer::nn;

namespace {

}  // namespace

TEST_CASE_TEMPLATE("state_dict: an nn::Linear saved and loaded into another is equal bit for bit", T, float, double) {
  ScratchDir dir;
  ef::manual_seed(1);
  nn::Linear<T> a(5, 3);
  ef::manual_seed(2);
  nn::Linear<T> b(5, 3);
  REQUIRE(parameter_values(a) != parameter_values(b));

  const auto sd = io::state_dict(a);
  CHECK(sd.size() == 2);
  CHECK(sd.at("weight").shape() == std::vector<index_t>{3, 5});
  CHECK(sd.at("bias").shape() == std::vector<index_t>{3});
  CHECK(sd.at("weight").dtype() == io::dtype_of<T>());

  io::save_model(a, dir / "linear.safetensors");
  const auto f = io::SafeTensorsFile::from_file(dir / "linear.safetensors");
  CHECK(f.names() == std::vector<std::string>{"bias", "weight"});
  CHECK(f.metadata() == io::Metadata{{"format", "pt"}});  // what Hugging Face transformers looks for
  const auto report = io::load_model(b, dir / "linear.safetensors");
  CHECK(report.missing_keys.empty());
  CHECK(report.unexpected_keys.empty());
  CHECK(parameter_values(a) == parameter_values(b));

  // In memory, without a file.
  ef::manual_seed(3);
  nn::Linear<T> c(5, 3);
  io::load_state_dict(c, io::state_dict(a));
  CHECK(parameter_values(a) == parameter_values(c));
}

TEST_CASE("state_dict: nn::MultiHeadAttention round trips by its names (qkv.weight, out.bias, ...)") {
  ScratchDir dir;
  ef::manual_seed(10);
  nn::MultiHeadAttention<float> a(8, 2, 0.0);
  ef::manual_seed(11);
  nn::MultiHeadAttention<float> b(8, 2, 0.0);
  const auto sd = io::state_dict(a);
  std::vector<std::string> names;
  for (const auto& [name, t] : sd) names.push_back(name);
  CHECK(names == std::vector<std::string>{"out.bias", "out.weight", "qkv.bias", "qkv.weight"});
  CHECK(sd.at("qkv.weight").shape() == std::vector<index_t>{24, 8});

  io::save_model(a, dir / "mha.safetensors");
  io::load_model(b, dir / "mha.safetensors");
  a.eval();
  b.eval();
  ef::manual_seed(12);
  const auto x = ef::randn<float>({2, 3, 8});
  CHECK(a.forward(x).to_vector() == b.forward(x).to_vector());

  // Saved under a prefix (as inside a larger model), loaded with rename.
  io::TensorDict prefixed;
  for (const auto& [name, t] : sd) prefixed.emplace("h.0.attn." + name, t);
  io::save_safetensors(dir / "prefixed.safetensors", prefixed);
  ef::manual_seed(13);
  nn::MultiHeadAttention<float> c(8, 2, 0.0);
  io::LoadOptions opts;
  opts.rename = [](const std::string& n) { return "h.0.attn." + n; };
  io::load_model(c, dir / "prefixed.safetensors", opts);
  CHECK(parameter_values(a) == parameter_values(c));
}

namespace {
// A layer with a persistent buffer (saved, like running statistics) and a non-persistent one (a cache that
// PyTorch's state_dict leaves out).
struct WithBuffers : nn::Module<float> {
  nn::Linear<float> proj{3, 2};
  // Shapes spelled out: GCC 12 takes a braced list bound to an array reference in a default member
  // initializer for a dangling pointer (-Wdangling-pointer, a false positive).
  ef::Tensor<float, 1> running = ef::zeros<float>(ef::Shape<1>{2});
  ef::Tensor<float, 2> scratch = ef::zeros<float>(ef::Shape<2>{2, 2});
  std::string type_name() const override { return "WithBuffers"; }
  void register_members(nn::Members<float>& m) override {
    m.child("proj", proj);
    m.buffer("running", running);
    m.buffer("scratch", scratch, /*persistent*/ false);
  }
};
}  // namespace

TEST_CASE("state_dict: persistent buffers are saved and loaded with the parameters, others are not") {
  ScratchDir dir;
  WithBuffers a, b;
  a.running.fill_(2.5f);
  a.scratch.fill_(7.0f);
  const auto keys = io::state_dict(a);
  std::vector<std::string> names;
  for (const auto& [k, v] : keys) names.push_back(k);
  CHECK(names == std::vector<std::string>{"proj.bias", "proj.weight", "running"});  // sorted map; no scratch
  io::save_model(a, dir / "buffers.safetensors");
  io::load_model(b, dir / "buffers.safetensors");
  CHECK(b.running.to_vector() == std::vector<float>{2.5f, 2.5f});
  CHECK(b.scratch.to_vector() == std::vector<float>(4, 0.0f));  // not in the file, untouched
  CHECK(parameter_values(b) == parameter_values(a));
}

TEST_CASE("state_dict: strict loads list every missing and unexpected key; the module is left unchanged") {
  ScratchDir dir;
  const auto path = dir / "partial.safetensors";
  ef::manual_seed(4);
  nn::Linear<float> src(4, 2);
  io::save_safetensors(path, {{"weight", src.weight.data}, {"extra", ef::zeros<float>({3})}, {"more.bias", ef::ones<float>({1})}});

  ef::manual_seed(5);
  nn::Linear<float> dst(4, 2);
  const auto before = parameter_values(dst);
  CHECK(error_of<io::checkpoint_error>([&] { io::load_model(dst, path); }) ==
        path.string() + ": cannot load the state dict: 1 missing key: \"bias\"; 2 unexpected keys: \"extra\", \"more.bias\"");
  CHECK(parameter_values(dst) == before);

  // Non-strict: what matches is loaded, the rest reported (PyTorch's strict=False).
  io::LoadOptions lenient;
  lenient.strict = false;
  const auto report = io::load_model(dst, path, lenient);
  CHECK(report.missing_keys == std::vector<std::string>{"bias"});
  CHECK(report.unexpected_keys == std::vector<std::string>{"extra", "more.bias"});
  CHECK(dst.weight.data.to_vector() == src.weight.data.to_vector());
  CHECK(dst.bias->data.to_vector() == before[1]);

  // ignore: keys that are expected to be unused (buffers) are not reported.
  io::LoadOptions ignoring = lenient;
  ignoring.ignore = [](const std::string& k) { return k == "extra"; };
  CHECK(io::load_model(dst, path, ignoring).unexpected_keys == std::vector<std::string>{"more.bias"});

  // The per-head layout has other names than the fused one: a strict load says which.
  nn::MultiHeadAttention<float> fused(4, 2, 0.0);
  nn::tutorial::MultiHeadAttentionPerHead<float> heads(4, 2, 0.0);
  io::save_model(fused, dir / "fused.safetensors");
  const auto msg = error_of<io::checkpoint_error>([&] { io::load_model(heads, dir / "fused.safetensors"); });
  CHECK(msg.find("14 missing keys: \"heads.0.q.weight\", \"heads.0.q.bias\", \"heads.0.k.weight\"") != std::string::npos);
  CHECK(msg.find("\"output_linear.weight\", \"output_linear.bias\"; 4 unexpected keys: \"out.bias\", \"out.weight\", "
                 "\"qkv.bias\", \"qkv.weight\"") != std::string::npos);
}

TEST_CASE("state_dict: a shape or dtype mismatch names the tensor and both shapes, strict or not") {
  ScratchDir dir;
  const auto path = dir / "wide.safetensors";
  nn::Linear<float> wide(4, 6);
  io::save_model(wide, path);
  nn::Linear<float> narrow(4, 3);
  const auto before = parameter_values(narrow);
  const std::string expected = path.string() +
                               ": cannot load the state dict: shape mismatch for \"weight\": [6, 4] in the checkpoint, "
                               "[3, 4] in the module; shape mismatch for \"bias\": [6] in the checkpoint, [3] in the module";
  CHECK(error_of<io::checkpoint_error>([&] { io::load_model(narrow, path); }) == expected);
  io::LoadOptions lenient;
  lenient.strict = false;
  CHECK(error_of<io::checkpoint_error>([&] { io::load_model(narrow, path, lenient); }) == expected);
  CHECK(parameter_values(narrow) == before);

  // An integer tensor cannot become a weight.
  io::save_safetensors(dir / "ids.safetensors", {{"weight", ef::zeros<std::int64_t>({3, 4})}, {"bias", ef::zeros<float>({3})}});
  CHECK(error_of<io::checkpoint_error>([&] { io::load_model(narrow, dir / "ids.safetensors"); }) ==
        (dir / "ids.safetensors").string() +
            ": cannot load the state dict: dtype mismatch for \"weight\": I64 in the checkpoint, a floating dtype (F16, "
            "BF16, F32, F64) is needed");
  // Through a rename, the parameter's own name is given too.
  io::LoadOptions renamed;
  renamed.rename = [](const std::string& n) { return "lin." + n; };
  io::save_safetensors(dir / "renamed.safetensors", {{"lin.weight", ef::zeros<float>({3, 5})}, {"lin.bias", ef::zeros<float>({3})}});
  CHECK(error_of<io::checkpoint_error>([&] { io::load_model(narrow, dir / "renamed.safetensors", renamed); }) ==
        (dir / "renamed.safetensors").string() +
            ": cannot load the state dict: shape mismatch for \"lin.weight\" (parameter \"weight\"): [3, 5] in the "
            "checkpoint, [3, 4] in the module");
}

TEST_CASE("state_dict: Hugging Face GPT-2 Conv1D weights (stored (in, out)) load into Linear with transpose") {
  ScratchDir dir;
  // A GPT-2 block's attention as Hugging Face stores it: c_attn.weight (C, 3C), c_attn.bias (3C), the causal
  // mask buffer attn.bias, c_proj.weight (C, C).
  const index_t c = 8;
  ef::manual_seed(21);
  const auto c_attn_w = ef::randn<float>({c, 3 * c});
  const auto c_attn_b = ef::randn<float>({3 * c});
  const auto c_proj_w = ef::randn<float>({c, c});
  const auto c_proj_b = ef::randn<float>({c});
  io::save_safetensors(dir / "gpt2.safetensors",
                       {{"h.0.attn.c_attn.weight", c_attn_w}, {"h.0.attn.c_attn.bias", c_attn_b},
                        {"h.0.attn.c_proj.weight", c_proj_w}, {"h.0.attn.c_proj.bias", c_proj_b},
                        {"h.0.attn.bias", ef::ones<float>({1, 1, 4, 4})}},
                       {{"format", "pt"}});

  nn::MultiHeadAttention<float> attn(c, 2, 0.0);
  io::LoadOptions hf;
  hf.rename = [](const std::string& n) {
    return "h.0.attn." + std::string(n.starts_with("qkv.") ? "c_attn." + n.substr(4) : "c_proj." + n.substr(4));
  };
  hf.transpose = io::gpt2_conv1d_weight;
  hf.ignore = [](const std::string& k) { return k.ends_with(".attn.bias"); };
  const auto report = io::load_model(attn, dir / "gpt2.safetensors", hf);
  CHECK(report.unexpected_keys.empty());
  CHECK(attn.qkv.weight.shape() == ef::Shape<2>{3 * c, c});
  CHECK(attn.qkv.weight.data.to_vector() == c_attn_w.t().contiguous().to_vector());
  CHECK(attn.qkv.bias->data.to_vector() == c_attn_b.to_vector());
  CHECK(attn.out.weight.data.to_vector() == c_proj_w.t().contiguous().to_vector());

  // Without the transpose hook the shapes disagree, and the message says so.
  io::LoadOptions plain = hf;
  plain.transpose = nullptr;
  CHECK(error_of<io::checkpoint_error>([&] { io::load_model(attn, dir / "gpt2.safetensors", plain); })
            .find("shape mismatch for \"h.0.attn.c_attn.weight\" (parameter \"qkv.weight\"): [8, 24] in the "
                  "checkpoint, [24, 8] in the module") != std::string::npos);
  CHECK(io::gpt2_conv1d_weight("transformer.h.11.mlp.c_fc.weight"));
  CHECK_FALSE(io::gpt2_conv1d_weight("transformer.h.11.mlp.c_fc.bias"));
  CHECK_FALSE(io::gpt2_conv1d_weight("lm_head.weight"));
}

TEST_CASE("state_dict: float and double checkpoints load into either precision") {
  ScratchDir dir;
  ef::manual_seed(31);
  nn::Linear<double> d(3, 2);
  io::save_model(d, dir / "double.safetensors");
  nn::Linear<float> f(3, 2);
  io::load_model(f, dir / "double.safetensors");
  const auto dv = d.weight.data.to_vector();
  const auto fv = f.weight.data.to_vector();
  for (std::size_t i = 0; i < dv.size(); ++i) CHECK(fv[i] == static_cast<float>(dv[i]));  // rounded, like copy_
  nn::Linear<double> back(3, 2);
  io::save_model(f, dir / "float.safetensors");
  io::load_model(back, dir / "float.safetensors");
  for (std::size_t i = 0; i < fv.size(); ++i) CHECK(back.weight.data.to_vector()[i] == static_cast<double>(fv[i]));
}

TEST_CASE("state_dict: tensors are read into the parameters' own storage; a file changed after opening is refused") {
  ScratchDir dir;
  const auto path = dir / "linear.safetensors";
  ef::manual_seed(41);
  nn::Linear<float> a(6, 4);
  io::save_model(a, path);
  ef::manual_seed(42);
  nn::Linear<float> b(6, 4);
  // The load writes through the flat named_parameters() views: the layer keeps its storage, now holding
  // the file's values.
  const float* weight_storage = b.weight.data.data();
  io::load_state_dict(b, io::SafeTensorsFile::from_file(path));
  CHECK(b.weight.data.data() == weight_storage);
  CHECK(parameter_values(b) == parameter_values(a));

  // A file truncated between opening and loading: the check before the first copy notices, and the module
  // is left as it was (the strict checks passed: the header is still the one read at open).
  ef::manual_seed(43);
  nn::Linear<float> c(6, 4);
  const auto before = parameter_values(c);
  const auto f = io::SafeTensorsFile::from_file(path);
  fs::resize_file(path, fs::file_size(path) - 4);
  const auto msg = error_of<io::checkpoint_error>([&] { io::load_state_dict(c, f); });
  INFO(msg);
  CHECK(msg.rfind(path.string() + ": the file changed while it was being read (", 0) == 0);
  CHECK(parameter_values(c) == before);
}
