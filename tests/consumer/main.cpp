// Builds against the installed package: find_package(eigenformer) + eigenformer::eigenformer.
#include <eigenformer/eigenformer.hpp>

#include <iostream>

int main() {
  const eigenformer::Tensor<float, 2> t = eigenformer::zeros<float>({2, 3});
  std::cout << t << '\n';
  return t.numel() == 6 ? 0 : 1;
}
