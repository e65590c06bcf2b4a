// A small, fast, seeded random generator whose sequence is the same on every platform and
// standard library (std::shuffle and std::uniform_int_distribution are not), so that a seed names
// one simulation everywhere. xoshiro256** seeded through splitmix64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpufrac {

class Random {
 public:
  explicit Random(uint64_t seed);

  // 64 uniformly random bits.
  uint64_t Next();
  // Uniform in [0, n); n > 0. Unbiased (Lemire's method with rejection).
  uint64_t Uniform(uint64_t n);
  // Uniform in [0, 1).
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Fisher-Yates shuffle.
  template <typename T>
  void Shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[Uniform(i)]);
  }

  // A uniformly random permutation of 0..n-1.
  std::vector<int> Permutation(int n);

 private:
  uint64_t s_[4];
};

}  // namespace gpufrac
