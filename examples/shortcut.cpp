// Shortcut (residual) connections and vanishing gradients, BERT-from-scratch section 1.19, with the network of
// LLMs from scratch chapter 4 (ExampleDeepNeuralNetwork): five Linear + GELU layers of sizes
// [3, 3, 3, 3, 3, 1]. Without shortcuts the mean absolute weight gradient shrinks from 0.005 in the last
// layer to 0.0002 in the first; with x = x + layer(x) it stays above 0.2 everywhere. Each layer here is an
// nn::Sequential of nn::Linear and nn::GELU (tanh), and backward runs layer by layer, adding the gradient
// that flows around each shortcut to the one that flows through the layer.
//
// After manual_seed(123) the weights are bit for bit those of PyTorch (test `shortcut network: seeded weights,
// output and all gradients match PyTorch (fixtures)`), so the printed gradients are the book's (worked example
// shortcut_gradients) to within float rounding, about 1e-6 relative:
//   without shortcut: 0.00020174 0.00012011 0.00071520 0.00139887 0.00504965 (layers.0 ... layers.4)
//   with shortcut:    0.22169793 0.20694107 0.32897000 0.26657322 1.32585418
#include <eigenformer/nn.hpp>
#include <eigenformer/train/losses.hpp>

#include <iomanip>
#include <iostream>
#include <vector>

namespace ef = eigenformer;
namespace nn = eigenformer::nn;

namespace {

using Block = nn::Sequential<float, nn::Linear<float>, nn::GELU<float>>;

// The book's module: its one child is the ModuleList "layers", so named_parameters() gives the book's names
// ("layers.0.0.weight") and `std::cout << model` prints the module tree as PyTorch lays it out.
class ExampleDeepNeuralNetwork : public nn::Module<float> {
 public:
  ExampleDeepNeuralNetwork(const std::vector<ef::index_t>& layer_sizes, bool use_shortcut) {
    // One layer after another, so the weights are drawn in PyTorch's order.
    for (std::size_t i = 0; i + 1 < layer_sizes.size(); ++i) {
      layers_.push_back(Block{nn::Linear<float>(layer_sizes[i], layer_sizes[i + 1]),
                              nn::GELU<float>(nn::GeluApproximate::tanh)});
      // The book adds the shortcut where input and output shapes agree, which the sizes decide up front.
      shortcut_.push_back(use_shortcut && layer_sizes[i] == layer_sizes[i + 1]);
    }
  }

  std::string type_name() const override { return "ExampleDeepNeuralNetwork"; }
  void register_members(nn::Members<float>& m) override { m.child("layers", layers_); }

  // (B, 3) -> (B, 1)
  ef::Tensor<float, 2> forward(ef::Tensor<float, 2> x) const {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const auto layer_output = layers_[i].forward(x);
      x = shortcut_[i] ? x + layer_output : layer_output;
    }
    return x;
  }

  // Gradient of the output in, gradient of the input out; each layer accumulates its parameters' gradients.
  ef::Tensor<float, 2> backward(ef::Tensor<float, 2> grad) {
    for (std::size_t i = layers_.size(); i-- > 0;) {
      const auto through_layer = layers_[i].backward(grad);
      grad = shortcut_[i] ? grad + through_layer : through_layer;  // x + layer(x): both paths add up
    }
    return grad;
  }

 private:
  nn::ModuleList<Block> layers_;
  std::vector<bool> shortcut_;
};

// The book's print_gradients: an MSE loss against the target 0, backward, then each weight's mean |grad|.
void print_gradients(ExampleDeepNeuralNetwork& model, const ef::Tensor<float, 2>& x) {
  const auto output = model.forward(x);
  const auto target = ef::tensor<float>({{0.f}});
  nn::MSELoss<float> loss;
  std::cout << "loss = " << loss.forward(output, target) << "\n";
  model.backward(loss.backward());
  for (auto& p : model.named_parameters())
    if (p.name.ends_with("weight"))
      std::cout << p.name << " has gradient mean of " << std::setprecision(17)
                << static_cast<double>(ef::mean(ef::abs(p.grad())).item()) << "\n";
}

}  // namespace

int main() {
  const std::vector<ef::index_t> layer_sizes{3, 3, 3, 3, 3, 1};
  const auto sample_input = ef::tensor<float>({{1.f, 0.f, -1.f}});

  std::cout << "== Without shortcut connections ==\n";
  ef::manual_seed(123);
  ExampleDeepNeuralNetwork model_without_shortcut(layer_sizes, false);
  std::cout << model_without_shortcut << "\n";
  print_gradients(model_without_shortcut, sample_input);

  std::cout << "\n== With shortcut connections ==\n";
  ef::manual_seed(123);
  ExampleDeepNeuralNetwork model_with_shortcut(layer_sizes, true);
  print_gradients(model_with_shortcut, sample_input);
}
