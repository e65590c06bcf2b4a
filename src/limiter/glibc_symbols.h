// Binds the C library functions libgpufrac.so calls to their oldest symbol versions, so the library
// built on a new glibc still loads on glibc 2.17 and later. CMake forces this header first into
// every source of the library (-include); docs/limiter.md, "Which systems it loads on".
#ifndef GPUFRAC_LIMITER_GLIBC_SYMBOLS_H_
#define GPUFRAC_LIMITER_GLIBC_SYMBOLS_H_

// glibc 2.34 moved libdl and libpthread into libc and gave the moved functions a new default
// version (dlopen@@GLIBC_2.34), keeping the old one as a compatibility symbol. Linking on 2.34+
// picks the new version, and a loader older than 2.34 then refuses the whole library: under
// /etc/ld.so.preload that means no program in the container starts. Binding the old version
// instead works on both: new glibc serves it from libc, old glibc from libdl.so.2 and
// libpthread.so.0, which the library names as DT_NEEDED for that reason (CMakeLists.txt here).
//
// Only functions whose default version is newer than the baseline need a line here; a function
// that only ever had one version (pthread_mutex_lock, open, ...) binds to it anyway. A line for a
// function a source does not call costs nothing. Never list dlsym: the library defines dlsym
// itself (interpose.cc), and a .symver on a definition would export a versioned alias of it.
//
// Baselines: x86_64 starts at GLIBC_2.2.5 (robust mutexes arrived in 2.12); aarch64's first glibc
// was 2.17, so everything there is GLIBC_2.17. limiter_glibc_test reads the built library's
// version needs and fails on anything newer than GLIBC_2.17.
#if defined(__x86_64__)
#define GPUFRAC_GLIBC_BASE "GLIBC_2.2.5"
#define GPUFRAC_GLIBC_ROBUST "GLIBC_2.12"
#elif defined(__aarch64__)
#define GPUFRAC_GLIBC_BASE "GLIBC_2.17"
#define GPUFRAC_GLIBC_ROBUST "GLIBC_2.17"
#else
#error "libgpufrac.so: add this architecture's oldest glibc symbol versions to glibc_symbols.h"
#endif

#define GPUFRAC_BIND_SYMBOL(name, version) __asm__(".symver " #name "," #name "@" version)

// libdl (in libc since 2.34).
GPUFRAC_BIND_SYMBOL(dlopen, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(dlclose, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(dlerror, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(dlvsym, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(dladdr, GPUFRAC_GLIBC_BASE);

// libpthread (in libc since 2.34).
GPUFRAC_BIND_SYMBOL(pthread_key_create, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_key_delete, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_getspecific, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_setspecific, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_once, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_mutex_trylock, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_mutex_timedlock, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_mutexattr_init, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_mutexattr_destroy, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_mutexattr_setpshared, GPUFRAC_GLIBC_BASE);
GPUFRAC_BIND_SYMBOL(pthread_mutexattr_setrobust, GPUFRAC_GLIBC_ROBUST);
GPUFRAC_BIND_SYMBOL(pthread_mutex_consistent, GPUFRAC_GLIBC_ROBUST);

// Not bindable, so not called: stat/fstat (GLIBC_2.33; older glibc only exports __xstat and
// friends) — the library uses file_stat.h; shm_open/shm_unlink (librt before 2.34) — budget.cc
// opens /dev/shm itself.

#undef GPUFRAC_BIND_SYMBOL

#endif  // GPUFRAC_LIMITER_GLIBC_SYMBOLS_H_
