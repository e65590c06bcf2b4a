// What a process inside a workload cgroup may open, for the tests that attack its device fence.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "launch/cgroup.h"

namespace gpufrac::launch {

// In a child that joins `cgroup`, the errno of opening each of `paths` for reading (0: opened).
inline std::vector<int> OpenErrorsInside(const WorkloadCgroup& cgroup,
                                         const std::vector<std::string>& paths) {
  int out[2];
  if (pipe(out) != 0) return {};
  pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    if (!cgroup.Join(getpid()).ok()) _exit(3);
    for (const std::string& path : paths) {
      int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK);
      int error = fd >= 0 ? 0 : errno;
      if (fd >= 0) close(fd);
      (void)!write(out[1], &error, sizeof(error));
    }
    _exit(0);
  }
  close(out[1]);
  std::vector<int> errors;
  for (int error; read(out[0], &error, sizeof(error)) == sizeof(error);) errors.push_back(error);
  close(out[0]);
  waitpid(child, nullptr, 0);
  return errors;
}

}  // namespace gpufrac::launch
