// Leveled logging to stderr (see log.h).
#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace gpufrac {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

void Emit(LogLevel level, const char* tag, const char* format, va_list args) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  const int saved_errno = errno;  // Callers may log and then inspect errno.
  std::string line = "gpufrac: ";
  line += tag;
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n > 0) {
    const size_t prefix = line.size();
    line.resize(prefix + static_cast<size_t>(n) + 1);
    std::vsnprintf(line.data() + prefix, static_cast<size_t>(n) + 1, format, args);
    line.back() = '\n';  // Replaces the terminating NUL vsnprintf wrote.
  } else {
    line += '\n';
  }
  // stderr is unbuffered; flush anything stdio holds so the order of lines is kept, then write
  // the line in one go.
  std::fflush(stderr);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t written = ::write(STDERR_FILENO, p, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) break;
    p += written;
    left -= static_cast<size_t>(written);
  }
  errno = saved_errno;
}

}  // namespace

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

#define GPUFRAC_DEFINE_LOG_(name, level, tag) \
  void name(const char* format, ...) {        \
    va_list args;                             \
    va_start(args, format);                   \
    Emit(level, tag, format, args);           \
    va_end(args);                             \
  }
GPUFRAC_DEFINE_LOG_(LogDebug, LogLevel::kDebug, "debug: ")
GPUFRAC_DEFINE_LOG_(LogInfo, LogLevel::kInfo, "")
GPUFRAC_DEFINE_LOG_(LogWarning, LogLevel::kWarning, "warning: ")
GPUFRAC_DEFINE_LOG_(LogError, LogLevel::kError, "error: ")
#undef GPUFRAC_DEFINE_LOG_

}  // namespace gpufrac
