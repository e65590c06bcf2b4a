// stat and fstat for code that runs inside libgpufrac.so, made from the system calls: glibc's own
// stat/fstat symbols exist only since 2.33, and the library must load on 2.17 (glibc_symbols.h).
// For initialisation only; the hot paths make no system calls.
#ifndef GPUFRAC_LIMITER_FILE_STAT_H_
#define GPUFRAC_LIMITER_FILE_STAT_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace gpufrac::limiter {

// On 64-bit Linux (x86_64, aarch64) glibc's struct stat is the kernel's, and glibc 2.33+ itself
// implements stat/fstat with exactly these calls into the caller's buffer.
static_assert(sizeof(void*) == 8, "struct stat is the kernel's only on 64-bit Linux");

// stat(2): follows symbolic links.
inline int StatPath(const char* path, struct stat* st) {
  return static_cast<int>(syscall(SYS_newfstatat, AT_FDCWD, path, st, 0));
}

// fstat(2).
inline int StatFd(int fd, struct stat* st) { return static_cast<int>(syscall(SYS_fstat, fd, st)); }

// The inode of this process's PID namespace (0 if /proc does not say). PIDs only identify
// processes within one namespace.
inline uint64_t PidNamespace() {
  struct stat st;
  return StatPath("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace gpufrac::limiter

#endif  // GPUFRAC_LIMITER_FILE_STAT_H_
