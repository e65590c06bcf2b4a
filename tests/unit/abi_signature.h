// For the checks of our ABI declarations against NVIDIA's headers: whether two function pointer
// types are ABI-compatible.
#pragma once

#include <type_traits>

namespace gpufrac::testing {

// Two parameter types are ABI-compatible: same size, both pointers or both not, same constness
// of what they point to.
template <typename A, typename B>
constexpr bool SameParam() {
  return sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B> &&
         std::is_const_v<std::remove_pointer_t<A>> == std::is_const_v<std::remove_pointer_t<B>>;
}

template <typename A, typename B>
struct SameSignature : std::false_type {};
template <typename RA, typename... PA, typename RB, typename... PB>
struct SameSignature<RA (*)(PA...), RB (*)(PB...)> {
  static constexpr bool Check() {
    if constexpr (sizeof...(PA) != sizeof...(PB)) {
      return false;
    } else {
      return sizeof(RA) == sizeof(RB) && (SameParam<PA, PB>() && ...);
    }
  }
  static constexpr bool value = Check();
};

}  // namespace gpufrac::testing
