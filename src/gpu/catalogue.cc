// The GPU model table and its lookups. Plain constexpr data: no heap, no exceptions, no static
// constructors (the simulated driver links this file).
#include "gpu/catalogue.h"

#include <array>

namespace gpufrac::gpu {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// Device memory one bare CUDA context takes: what nvidia-smi shows a process holding a context
// and a 2 MiB allocation, less the 2 MiB (tests/gpu/physical_use.sh context). Measured 527 MiB
// on the H100-80GB and the H200 with driver 580.159.04 (docs/real-gpu-checks.md); the other
// Hopper models share that chip, and Blackwell gets the same figure until measured, as too low
// a figure would let a workload pass its limit. Ampere and Turing/Ada are estimates per
// architecture, to be replaced by measurements.
constexpr std::uint64_t kHopperBlackwellContextBytes = 527 * kMiB;
constexpr std::uint64_t kTuringAdaContextBytes = 300 * kMiB;
constexpr std::uint64_t kAmpereContextBytes = 400 * kMiB;

// memory_bytes is the total NVML (nvmlDeviceGetMemoryInfo) and cuDeviceTotalMem report on the
// real card, not the marketing size: e.g. an "80GB" H100 HBM3 reports 81559 MiB. The B200 figure
// is the one current drivers report (it has varied slightly between driver releases).
constexpr std::array kModels = {
    GpuModel{.short_name = "A100-40GB",
             .nvml_name = "NVIDIA A100-SXM4-40GB",
             .architecture = "Ampere",
             .memory_bytes = 40960 * kMiB,
             .sm_count = 108,
             .compute_major = 8,
             .compute_minor = 0,
             .pci_device_id = 0x20B0,
             .max_clock_khz = 1410000,
             .context_bytes = kAmpereContextBytes},
    GpuModel{.short_name = "A100-80GB",
             .nvml_name = "NVIDIA A100-SXM4-80GB",
             .architecture = "Ampere",
             .memory_bytes = 81920 * kMiB,
             .sm_count = 108,
             .compute_major = 8,
             .compute_minor = 0,
             .pci_device_id = 0x20B2,
             .max_clock_khz = 1410000,
             .context_bytes = kAmpereContextBytes},
    GpuModel{.short_name = "H100-80GB",
             .nvml_name = "NVIDIA H100 80GB HBM3",
             .architecture = "Hopper",
             .memory_bytes = 81559 * kMiB,
             .sm_count = 132,
             .compute_major = 9,
             .compute_minor = 0,
             .pci_device_id = 0x2330,
             .max_clock_khz = 1980000,
             .context_bytes = kHopperBlackwellContextBytes},
    GpuModel{.short_name = "H200-141GB",
             .nvml_name = "NVIDIA H200",
             .architecture = "Hopper",
             .memory_bytes = 143771 * kMiB,
             .sm_count = 132,
             .compute_major = 9,
             .compute_minor = 0,
             .pci_device_id = 0x2335,
             .max_clock_khz = 1980000,
             .context_bytes = kHopperBlackwellContextBytes},
    GpuModel{.short_name = "A30-24GB",
             .nvml_name = "NVIDIA A30",
             .architecture = "Ampere",
             .memory_bytes = 24576 * kMiB,
             .sm_count = 56,
             .compute_major = 8,
             .compute_minor = 0,
             .pci_device_id = 0x20B7,
             .max_clock_khz = 1440000,
             .context_bytes = kAmpereContextBytes},
    GpuModel{.short_name = "L4",
             .nvml_name = "NVIDIA L4",
             .architecture = "Ada",
             .memory_bytes = 23034 * kMiB,
             .sm_count = 58,
             .compute_major = 8,
             .compute_minor = 9,
             .pci_device_id = 0x27B8,
             .max_clock_khz = 2040000,
             .context_bytes = kTuringAdaContextBytes},
    GpuModel{.short_name = "T4",
             .nvml_name = "Tesla T4",
             .architecture = "Turing",
             .memory_bytes = 15360 * kMiB,
             .sm_count = 40,
             .compute_major = 7,
             .compute_minor = 5,
             .pci_device_id = 0x1EB8,
             .max_clock_khz = 1590000,
             .context_bytes = kTuringAdaContextBytes},
    GpuModel{.short_name = "B200",
             .nvml_name = "NVIDIA B200",
             .architecture = "Blackwell",
             .memory_bytes = 183359 * kMiB,
             .sm_count = 148,
             .compute_major = 10,
             .compute_minor = 0,
             .pci_device_id = 0x2901,
             .max_clock_khz = 1965000,
             .context_bytes = kHopperBlackwellContextBytes},
    // The H100 NVL (PCIe, 94 GB HBM3): nvidia-smi reports 95830 MiB on driver 535.
    GpuModel{.short_name = "H100-94GB",
             .nvml_name = "NVIDIA H100 NVL",
             .architecture = "Hopper",
             .memory_bytes = 95830 * kMiB,
             .sm_count = 132,
             .compute_major = 9,
             .compute_minor = 0,
             .pci_device_id = 0x2321,
             .max_clock_khz = 1785000,
             .context_bytes = kHopperBlackwellContextBytes},
    // The Hopper GPU of a GH200 Grace Hopper superchip with 96 GB HBM3 (NVML names the superchip
    // by its total memory, 480 GB with the Grace LPDDR5X). 97871 MiB is what nvidia-smi reports
    // for it on several machines' published outputs.
    GpuModel{.short_name = "GH200-96GB",
             .nvml_name = "NVIDIA GH200 480GB",
             .architecture = "Hopper",
             .memory_bytes = 97871 * kMiB,
             .sm_count = 132,
             .compute_major = 9,
             .compute_minor = 0,
             .pci_device_id = 0x2342,
             .max_clock_khz = 1980000,
             .context_bytes = kHopperBlackwellContextBytes},
};

constexpr char ToLowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }

}  // namespace

bool NamesEqualIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ToLowerAscii(a[i]) != ToLowerAscii(b[i])) return false;
  }
  return true;
}

std::span<const GpuModel> AllModels() { return kModels; }

const GpuModel* FindModel(std::string_view short_name) {
  for (const GpuModel& model : kModels) {
    if (NamesEqualIgnoringCase(model.short_name, short_name)) return &model;
  }
  return nullptr;
}

const GpuModel* FindModelByNvmlName(std::string_view nvml_name) {
  for (const GpuModel& model : kModels) {
    if (model.nvml_name == nvml_name) return &model;
  }
  return nullptr;
}

}  // namespace gpufrac::gpu
