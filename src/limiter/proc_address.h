// How cuGetProcAddress chooses among the variants of an entry point (cuMemAlloc -> cuMemAlloc_v2,
// cuMemAllocAsync -> cuMemAllocAsync_ptsz, ...), for when the driver answers with an address the
// limiter cannot match to an exported function: the limiter then picks its hook for the same
// variant by these rules.
#pragma once

namespace gpufrac::limiter {

struct Variant {
  const char* symbol;  // exported name, e.g. "cuMemAllocAsync_ptsz"
  int since;           // CUDA version that introduced it
};

// The index in `variants` of the variant cuGetProcAddress(`base`, `cuda_version`, per-thread
// default stream or not) resolves to: same base name (the symbol without its _vN / _ptsz / _ptds
// suffix), the per-thread variant when asked for and one exists, and the newest one introduced
// at or before `cuda_version`. -1 when none qualifies (the driver's answer is then some variant
// not in `variants`, which must be left alone).
int ChooseVariant(const Variant* variants, int count, const char* base, int cuda_version,
                  bool per_thread);

}  // namespace gpufrac::limiter
