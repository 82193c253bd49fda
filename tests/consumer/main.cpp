// Builds against the installed package: find_package(eigenformer COMPONENTS tokenizers) +
// eigenformer::eigenformer + eigenformer::tokenizers (which links utf8proc). Compiled with -O2 -Wall -Wextra
// -Werror and no instruction-set flags, as a user's program might be: the kernels compiled for AVX2 and
// AVX-512 inside the headers (tensor/cpu_isa.hpp: products, GELU, softmax) must build without a warning,
// and the run prints which instruction set this CPU's products use.
#include <eigenformer/eigenformer.hpp>
#include <eigenformer/tokenizers/unicode.hpp>

#include <iostream>
#include <string>

int main() {
  namespace ef = eigenformer;
  const ef::Tensor<float, 2> t = ef::zeros<float>({2, 3});
  std::cout << t << '\n';
  // NFD + mark removal through the linked utf8proc: "Crème" -> "Creme".
  const std::string stripped = ef::tokenizers::unicode::strip_accents("Cr\xC3\xA8me");
  std::cout << stripped << '\n';
  // A layer's product of many rows (the packed kernel, its weight packed) and of one row (the few-row
  // kernels, with a bfloat16 weight too): 24 ones times 0.5 is 12 exactly, whatever the kernel.
  ef::nn::Linear<float> linear(24, 40, false);
  linear.weight.data.fill_(0.5f);
  linear.eval();
  linear.pack_weights();
  const auto many = linear.forward(ef::ones<float>({16, 24}));
  linear.to_bf16_weights();
  const auto one = linear.forward(ef::ones<float>({1, 24}));
  std::cout << "products: " << ef::backend::cpu_isa_name(ef::backend::cpu_isa()) << ", "
            << ef::backend::gemm_library() << '\n';
  const bool products_ok = many(15, 39) == 12.0f && one(0, 0) == 12.0f;
  // The element-wise kernels (tensor/vector_math.hpp): GELU(0) is 0, and a softmax of equal values is
  // uniform, 0.25 exactly.
  ef::nn::GELU<float> gelu;
  const auto activated = gelu.forward(ef::zeros<float>({3, 20}));
  const auto weights = ef::softmax(ef::zeros<float>({2, 4}), -1);
  const bool elementwise_ok = activated(2, 19) == 0.0f && weights(1, 3) == 0.25f;
  return t.numel() == 6 && stripped == "Creme" && products_ok && elementwise_ok ? 0 : 1;
}
