// Minimal leveled logging to stderr: one line per message, prefixed "gpufrac: ". Messages are
// for people; machine output goes to stdout (--json), never through here.
#pragma once

#include <string_view>

namespace gpufrac {

enum class LogLevel : int {
  kDebug = 0,
  kInfo = 1,
  kWarning = 2,
  kError = 3,
  kQuiet = 4,  // Nothing is printed.
};

// Messages below the level are dropped. The default is kInfo. Safe to call from any thread.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// printf-style; a trailing newline is added. Each message is written with a single write so
// that lines from different threads or processes do not interleave. Output looks like
//   gpufrac: listening on 127.0.0.1:7070          (info)
//   gpufrac: warning: GPU 1 is lost               (warning)
//   gpufrac: error: no NVIDIA driver found ...    (error)
//   gpufrac: debug: dlopen failed: ...            (debug)
void LogDebug(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogInfo(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogWarning(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogError(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace gpufrac
