// Declares every interposed entry point from the hook table with its exact ABI type, so that each
// hand-written definition is checked by the compiler against the table.
#pragma once

#include <type_traits>

#include "limiter/runtime.h"

namespace gpufrac::limiter::fn {
#define GPUFRAC_FN_TYPE(lib, sym, opt) using sym = std::remove_pointer_t<abi::entry::sym::Fn>;
GPUFRAC_HOOKS(GPUFRAC_FN_TYPE)
#undef GPUFRAC_FN_TYPE
}  // namespace gpufrac::limiter::fn

extern "C" {
#define GPUFRAC_DECLARE(lib, sym, opt) \
  __attribute__((visibility("default"))) gpufrac::limiter::fn::sym sym;
GPUFRAC_HOOKS(GPUFRAC_DECLARE)
#undef GPUFRAC_DECLARE
}

namespace gpufrac::limiter {

// The call to make when the limiter is not in force: straight through, or refused when a limit
// file exists but is unusable (never run unlimited by accident).
template <typename Fn, typename... Args>
abi::CUresult Bypass(Fn real, Args... args) {
  if (g_rt.mode == Mode::kBroken) {
    ReportBroken();
    return abi::CUDA_ERROR_NOT_INITIALIZED;
  }
  return real(args...);
}

}  // namespace gpufrac::limiter
