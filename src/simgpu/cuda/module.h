// Modules and kernel functions of the simulated driver. Only PTX text is accepted: loading it
// records each `.entry NAME`, and those names are the functions the module provides.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "abi/cuda_abi.h"
#include "simgpu/cuda/context.h"

namespace gpufrac::simgpu {

struct Module;

struct Function {
  static constexpr std::uint32_t kMagic = 0x46756e63;

  std::uint32_t magic = kMagic;  // cleared when the module is unloaded
  Module* module = nullptr;
  std::string name;
};

struct Module {
  static constexpr std::uint32_t kMagic = 0x4d6f646c;

  std::uint32_t magic = kMagic;
  Context* context = nullptr;
  std::vector<std::unique_ptr<Function>> functions;
};

inline abi::CUmodule ToHandle(Module* module) { return reinterpret_cast<abi::CUmodule>(module); }
inline abi::CUfunction ToHandle(Function* function) {
  return reinterpret_cast<abi::CUfunction>(function);
}

// The kernel names a PTX text declares with `.entry`; false if `image` does not look like PTX
// (no `.version` directive).
bool ParsePtxEntries(std::string_view image, std::vector<std::string>* entries);

}  // namespace gpufrac::simgpu
