// How programs reach the hooks: finding the real driver entry points, and the three paths programs
// use to find driver functions — direct linking (our exports come first under LD_PRELOAD),
// dlopen + dlsym (dlsym is interposed here) and cuGetProcAddress (the driver picks the variant
// for the requested version and flags; we swap in the hook for exactly that variant).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "limiter/hooks.h"
#include "limiter/proc_address.h"

using namespace gpufrac::abi;

namespace gpufrac::limiter {

std::atomic<void*> g_real[kSymbolCount];
std::atomic<bool> g_resolved[2];

namespace {

struct Entry {
  const char* name;
  Library lib;
  void* hook;  // null for entry points we call but do not interpose
  bool optional;
  int since;  // CUDA version that introduced this variant
};

// Constant-initialised (relocations only): no constructor runs for it.
const Entry kEntries[kSymbolCount] = {
#define GPUFRAC_HOOK_ENTRY(lib, sym, opt) \
  {#sym, Library::lib, reinterpret_cast<void*>(&::sym), opt != 0, entry::sym::kSince},
#define GPUFRAC_CALL_ENTRY(lib, sym, opt) \
  {#sym, Library::lib, nullptr, opt != 0, entry::sym::kSince},
    GPUFRAC_HOOKS(GPUFRAC_HOOK_ENTRY) GPUFRAC_CALLS(GPUFRAC_CALL_ENTRY)
#undef GPUFRAC_HOOK_ENTRY
#undef GPUFRAC_CALL_ENTRY
};

// Stand-ins for entry points the installed driver lacks: the call fails the way a missing symbol
// would, instead of jumping to null. Every CUDA and NVML function returns an int status.
int MissingCuda() { return CUDA_ERROR_NOT_FOUND; }
int MissingNvml() { return NVML_ERROR_FUNCTION_NOT_FOUND; }

}  // namespace

using DlsymFn = void* (*)(void*, const char*);
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn gpufrac_real_dlsym = nullptr;
}

// glibc 2.34 moved dlsym into libc under a new version; older ones keep the original version.
static DlsymFn RealDlsym() {
  if (!gpufrac_real_dlsym) {
    for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
      if (void* p = dlvsym(RTLD_NEXT, "dlsym", version)) {
        gpufrac_real_dlsym = reinterpret_cast<DlsymFn>(p);
        break;
      }
    }
  }
  return gpufrac_real_dlsym;
}

__attribute__((constructor(101))) static void ResolveDlsymEarly() { RealDlsym(); }

}  // namespace gpufrac::limiter

// For the dlsym entry stub when it runs before our constructor (other preloaded libraries'
// constructors may run first).
extern "C" __attribute__((visibility("hidden"))) void* gpufrac_resolve_real_dlsym() {
  return reinterpret_cast<void*>(gpufrac::limiter::RealDlsym());
}

namespace gpufrac::limiter {

// Runs without a lock: dlopen may run library constructors that call back into hooked functions
// (and so here), and a lock held across it would deadlock against the loader's own lock. Threads
// racing here all find the same addresses; the one that publishes them first reports what is
// missing.
void ResolveLibrary(Library lib) {
  const char* soname = lib == Library::Cuda ? "libcuda.so.1" : "libnvidia-ml.so.1";
  void* handle = dlopen(soname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (!handle) handle = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
  char missing[512] = "";
  for (int i = 0; i < kSymbolCount; ++i) {
    if (kEntries[i].lib != lib) continue;
    void* real = handle ? RealDlsym()(handle, kEntries[i].name) : nullptr;
    if (!real) {
      real = reinterpret_cast<void*>(lib == Library::Cuda ? &MissingCuda : &MissingNvml);
      if (!kEntries[i].optional &&
          strlen(missing) + strlen(kEntries[i].name) + 3 < sizeof(missing)) {
        if (missing[0]) strcat(missing, ", ");
        strcat(missing, kEntries[i].name);
      }
    }
    g_real[i].store(real, std::memory_order_relaxed);
  }
  if (g_resolved[static_cast<int>(lib)].exchange(true, std::memory_order_acq_rel)) return;
  if (handle && missing[0] && g_rt.mode != Mode::kPassThrough) {
    PrintError("gpufrac: warning: %s lacks %s; those calls fail as unsupported\n", soname, missing);
  }
}

// What cuGetProcAddress hands the caller instead of the driver's answer `found` for `symbol`: the
// hook for exactly the variant the driver chose, found by its address. Should a driver answer
// with an internal address that is no exported function, the variant is chosen by the driver's
// documented rules (proc_address.h); an exported function we do not hook is left alone.
static void* HookFor(const char* symbol, void* found, int cuda_version, cuuint64_t flags) {
  for (int i = 0; i < kHookCount; ++i) {
    if (g_real[i].load(std::memory_order_relaxed) == found) return kEntries[i].hook;
  }
  // Pure string matching first: for the hundreds of names we do not hook this is the answer,
  // without touching the dynamic loader (dladdr takes its lock, and callers of cuGetProcAddress
  // may hold locks of their own).
  Variant variants[kHookCount];
  for (int i = 0; i < kHookCount; ++i) variants[i] = Variant{kEntries[i].name, kEntries[i].since};
  int chosen = ChooseVariant(variants, kHookCount, symbol, cuda_version,
                             (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
  if (chosen < 0) return found;
  // A hooked entry point whose address we do not know: an exported variant we do not hook (a
  // newer one, say) stays as it is; only an internal address gets the hook.
  Dl_info info;
  if (dladdr(found, &info) && info.dli_saddr == found) return found;
  return kEntries[chosen].hook;
}

static bool MayBeDriverName(const char* name) {
  return name && ((name[0] == 'c' && name[1] == 'u') ||
                  (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l'));
}

}  // namespace gpufrac::limiter

using namespace gpufrac::limiter;

// dlsym for every handle but RTLD_NEXT (see the entry stub below).
extern "C" __attribute__((visibility("hidden"))) void* gpufrac_dlsym_lookup(void* handle,
                                                                            const char* name) {
  void* found = RealDlsym()(handle, name);
  if (!found || g_rt.mode == Mode::kPassThrough || !MayBeDriverName(name)) return found;
  for (int i = 0; i < kHookCount; ++i) {
    if (strcmp(name, kEntries[i].name) == 0) return kEntries[i].hook;
  }
  return found;
}

// The exported dlsym. RTLD_NEXT means "after the caller's object", which glibc works out from the
// return address; so for RTLD_NEXT we jump into the real dlsym without a frame of our own (looking
// the real dlsym up first, with the arguments saved, if our constructor has not run yet).
#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
dlsym:
  cmpq $-1, %rdi
  jne gpufrac_dlsym_lookup
  movq gpufrac_real_dlsym(%rip), %rax
  testq %rax, %rax
  jne 1f
  pushq %rdi
  pushq %rsi
  subq $8, %rsp
  call gpufrac_resolve_real_dlsym
  addq $8, %rsp
  popq %rsi
  popq %rdi
1:
  jmp *%rax
  .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, %function
dlsym:
  cmn x0, #1
  b.ne gpufrac_dlsym_lookup
  adrp x16, gpufrac_real_dlsym
  ldr x16, [x16, :lo12:gpufrac_real_dlsym]
  cbnz x16, 1f
  stp x29, x30, [sp, #-32]!
  stp x0, x1, [sp, #16]
  bl gpufrac_resolve_real_dlsym
  mov x16, x0
  ldp x0, x1, [sp, #16]
  ldp x29, x30, [sp], #32
1:
  br x16
  .size dlsym, .-dlsym
)");
#else
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  return gpufrac_dlsym_lookup(handle, name);
}
#endif

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  CUresult r = Real_cuGetProcAddress_v2()(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS && symbol && pfn && *pfn && g_rt.mode != Mode::kPassThrough) {
    *pfn = HookFor(symbol, *pfn, cuda_version, flags);
  }
  return r;
}

extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                     cuuint64_t flags) {
  CUresult r = Real_cuGetProcAddress()(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && symbol && pfn && *pfn && g_rt.mode != Mode::kPassThrough) {
    *pfn = HookFor(symbol, *pfn, cuda_version, flags);
  }
  return r;
}
