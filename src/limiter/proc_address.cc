// Variant choice for cuGetProcAddress (see proc_address.h). Heap-free: runs inside the limiter.
#include "limiter/proc_address.h"

#include <cstring>

namespace gpufrac::limiter {
namespace {

bool EndsWith(const char* s, size_t len, const char* suffix) {
  size_t n = strlen(suffix);
  return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

// Length of `symbol` without its suffixes; sets `per_thread` if it is a _ptsz/_ptds variant.
size_t BaseLength(const char* symbol, bool* per_thread) {
  size_t len = strlen(symbol);
  *per_thread = EndsWith(symbol, len, "_ptsz") || EndsWith(symbol, len, "_ptds");
  if (*per_thread) len -= 5;
  if (len > 3 && symbol[len - 3] == '_' && symbol[len - 2] == 'v' && symbol[len - 1] >= '2' &&
      symbol[len - 1] <= '9') {
    len -= 3;
  }
  return len;
}

}  // namespace

int ChooseVariant(const Variant* variants, int count, const char* base, int cuda_version,
                  bool per_thread) {
  const size_t base_len = strlen(base);
  // A per-thread request gets the per-thread variant only where the entry point has one.
  bool has_per_thread = false;
  for (int i = 0; i < count; ++i) {
    bool pt;
    size_t len = BaseLength(variants[i].symbol, &pt);
    has_per_thread |= pt && len == base_len && memcmp(variants[i].symbol, base, len) == 0;
  }
  const bool want_per_thread = per_thread && has_per_thread;
  int best = -1;
  for (int i = 0; i < count; ++i) {
    bool pt;
    size_t len = BaseLength(variants[i].symbol, &pt);
    if (len != base_len || memcmp(variants[i].symbol, base, len) != 0 || pt != want_per_thread) {
      continue;
    }
    if (variants[i].since > cuda_version) continue;
    if (best < 0 || variants[i].since > variants[best].since) best = i;
  }
  return best;
}

}  // namespace gpufrac::limiter
