// GPU model catalogue: the static facts gpufrac needs about each NVIDIA model it knows (memory as
// NVML reports it, SM count, compute capability, per-context memory). Pure constexpr
// data with no heap and no exceptions, so it can be linked into the simulated driver.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace gpufrac::gpu {

struct GpuModel {
  // Our short name, used in configuration (`SIMGPU_CONFIG=2xH100-80GB`) and on the command line.
  std::string_view short_name;
  // The name NVML reports (nvmlDeviceGetName) and the CUDA driver reports (cuDeviceGetName).
  // Points at a string literal, so `nvml_name.data()` is NUL-terminated.
  std::string_view nvml_name;
  std::string_view architecture;  // "Turing", "Ampere", "Ada", "Hopper", "Blackwell"
  // Total device memory exactly as NVML / cuDeviceTotalMem report it on the real card: a little
  // less than the marketing size on HBM3 parts, because the driver withholds some of it.
  std::uint64_t memory_bytes;
  int sm_count;
  int compute_major;
  int compute_minor;
  // The PCI product id (the "device" half of NVML's pciDeviceId, vendor 0x10de), SXM variant
  // where several exist.
  std::uint16_t pci_device_id;
  int max_clock_khz;  // boost SM clock, as CU_DEVICE_ATTRIBUTE_CLOCK_RATE reports it
  // Device memory one bare CUDA context takes (stacks, heaps, driver bookkeeping): measured on
  // the models catalogue.cc says, an estimate per architecture on the others.
  std::uint64_t context_bytes;
};

// One CUDA context's memory on `model`, or on a GPU the catalogue lacks (model == nullptr) the
// largest measured figure (527 MiB, H100 and H200).
inline constexpr std::uint64_t kUnknownModelContextBytes = std::uint64_t{527} << 20;
inline std::uint64_t ContextBytes(const GpuModel* model) {
  return model ? model->context_bytes : kUnknownModelContextBytes;
}

// Device memory the kernels a framework runs take in its context. The driver loads them lazily,
// inside calls the limiter does not see (a launch, a library's first use), so the limiter charges
// this allowance with each context instead. Measured on an H100 with driver 580: nothing for
// CuPy, 32 MiB for JAX, 158 MiB for PyTorch after a matrix product, 240 MiB for PyTorch after a
// convolutional network's training step (cuBLAS and cuDNN), rounded up (docs/real-gpu-checks.md).
inline constexpr std::uint64_t kLoadedKernelsBytes = std::uint64_t{256} << 20;

// What the limiter charges for each context on `model`: the context and its loaded kernels. A
// memory limit must exceed it.
inline std::uint64_t ContextChargeBytes(const GpuModel* model) {
  return ContextBytes(model) + kLoadedKernelsBytes;
}

// Every model in the catalogue, in a fixed order.
std::span<const GpuModel> AllModels();

// The model whose short name matches, ignoring ASCII case; nullptr if none does.
const GpuModel* FindModel(std::string_view short_name);

// Whether two model or profile names are equal ignoring ASCII case (this library is linked into
// the simulated driver, so it cannot use gpufrac_common's helper).
bool NamesEqualIgnoringCase(std::string_view a, std::string_view b);

// The model whose NVML name matches exactly (as nvmlDeviceGetName returns it); nullptr if none.
const GpuModel* FindModelByNvmlName(std::string_view nvml_name);

}  // namespace gpufrac::gpu
