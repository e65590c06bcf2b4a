// MPS log lines (see mps_log.h).
#include "simgpu/mps/mps_log.h"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

namespace gpufrac::simgpu::mps {

LogFile::LogFile(const std::string& path, std::string_view who, bool echo)
    : file_(std::fopen(path.c_str(), "ae")), who_(who), echo_(echo) {}

LogFile::~LogFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void LogFile::Write(std::string_view message) {
  timeval now;
  ::gettimeofday(&now, nullptr);
  tm local;
  ::localtime_r(&now.tv_sec, &local);
  char stamp[64];
  ::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  const std::string line = "[" + std::string(stamp) + "." +
                           std::to_string(1000 + now.tv_usec / 1000).substr(1) + " " + who_ + " " +
                           std::to_string(::getpid()) + "] " + std::string(message) + "\n";
  if (file_ != nullptr) {
    std::fputs(line.c_str(), file_);
    std::fflush(file_);
  }
  if (echo_) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }
}

}  // namespace gpufrac::simgpu::mps
