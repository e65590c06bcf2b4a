// The MPS stand-ins' log files, in the line format NVIDIA documents for control.log and
// server.log: "[2013-08-05 12:50:23.347 Control 13894] Starting new server 13929 for user 500".
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace gpufrac::simgpu::mps {

class LogFile {
 public:
  // `who` is "Control" or "Server". Appends to `path`; with `echo` every line also goes to
  // standard output (the daemon in the foreground, -f).
  LogFile(const std::string& path, std::string_view who, bool echo);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  bool ok() const { return file_ != nullptr; }
  void Write(std::string_view message);

 private:
  std::FILE* file_ = nullptr;
  std::string who_;
  bool echo_ = false;
};

}  // namespace gpufrac::simgpu::mps
