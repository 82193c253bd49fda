// Builds against the installed package: find_package(eigenformer COMPONENTS tokenizers) +
// eigenformer::eigenformer + eigenformer::tokenizers (which links utf8proc).
#include <eigenformer/eigenformer.hpp>
#include <eigenformer/tokenizers/unicode.hpp>

#include <iostream>
#include <string>

int main() {
  const eigenformer::Tensor<float, 2> t = eigenformer::zeros<float>({2, 3});
  std::cout << t << '\n';
  // NFD + mark removal through the linked utf8proc: "Crème" -> "Creme".
  const std::string stripped = eigenformer::tokenizers::unicode::strip_accents("Cr\xC3\xA8me");
  std::cout << stripped << '\n';
  return t.numel() == 6 && stripped == "Creme" ? 0 : 1;
}
