// cuGetProcAddress: symbol lookup by base name and CUDA version, driven entirely by the entry
// point table (abi/cuda_entry_points.h) that also declares the exports.
#include <cstdio>
#include <string_view>

#include "simgpu/core/config.h"
#include "simgpu/cuda/cuda_exports.h"

namespace {

namespace abi = gpufrac::abi;
using abi::CUresult;

struct EntryPoint {
  std::string_view base;
  int version;
  void* symbol;
  void* per_thread_symbol;  // the _ptsz variant, if there is one
};

#define SIMGPU_PTSZ_ADDRESS_0(symbol) nullptr
#define SIMGPU_PTSZ_ADDRESS_1(symbol) reinterpret_cast<void*>(&symbol##_ptsz)
#define SIMGPU_ENTRY_POINT(base, symbol, version, ptsz) \
  {#base, version, reinterpret_cast<void*>(&symbol), SIMGPU_PTSZ_ADDRESS_##ptsz(symbol)},

// Addresses bind to this library's own definitions (it links with -Bsymbolic), so a library
// that interposes on these names still gets the driver's functions from cuGetProcAddress.
const EntryPoint kEntryPoints[] = {GPUFRAC_CUDA_ENTRY_POINTS(SIMGPU_ENTRY_POINT)};

#undef SIMGPU_ENTRY_POINT
#undef SIMGPU_PTSZ_ADDRESS_1
#undef SIMGPU_PTSZ_ADDRESS_0

int DriverVersion() {
  int version = 0;
  cuDriverGetVersion(&version);
  return version;
}

CUresult Lookup(const char* symbol, void** function, int cuda_version, abi::cuuint64_t flags,
                abi::CUdriverProcAddressQueryResult* status) {
  if (function == nullptr || symbol == nullptr ||
      (flags & ~static_cast<abi::cuuint64_t>(abi::CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                             abi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) !=
          0 ||
      cuda_version <= 0 || cuda_version > DriverVersion()) {
    // Documented: a CUDA version newer than the driver is an invalid argument.
    if (function != nullptr) *function = nullptr;
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  const bool per_thread = (flags & abi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const EntryPoint* best = nullptr;
  bool known = false;
  for (const EntryPoint& entry : kEntryPoints) {
    if (entry.base != symbol) continue;
    known = true;
    if (entry.version <= cuda_version && (best == nullptr || entry.version > best->version)) {
      best = &entry;
    }
  }
  if (best == nullptr) {
    *function = nullptr;
    if (status != nullptr) {
      *status = known ? abi::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : abi::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return abi::CUDA_ERROR_NOT_FOUND;
  }
  *function =
      per_thread && best->per_thread_symbol != nullptr ? best->per_thread_symbol : best->symbol;
  if (status != nullptr) *status = abi::CU_GET_PROC_ADDRESS_SUCCESS;
  return abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** function, int cuda_version,
                          abi::cuuint64_t flags) {
  return Lookup(symbol, function, cuda_version, flags, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** function, int cuda_version,
                             abi::cuuint64_t flags, abi::CUdriverProcAddressQueryResult* status) {
  return Lookup(symbol, function, cuda_version, flags, status);
}

}  // extern "C"
