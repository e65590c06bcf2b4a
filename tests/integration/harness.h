// Test harness for the limiter and the command line: a private simulated machine per test, limit
// files written as a launcher would, and child processes run with or without libgpufrac.so.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace gpufrac::testing {

struct RunResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
  // The value of `key=` in the output ("" if absent).
  std::string Get(const std::string& key) const;
  long long GetInt(const std::string& key) const;
};

// One simulated machine (its own SIMGPU_NAMESPACE), removed when the object goes.
class SimMachine {
 public:
  explicit SimMachine(std::string config = "1xH100-80GB");
  ~SimMachine();
  SimMachine(const SimMachine&) = delete;
  SimMachine& operator=(const SimMachine&) = delete;

  // Environment for processes on this machine (driver stand-ins on the library path).
  std::map<std::string, std::string> Env() const;
  // UUID of device `index` as the driver reports it.
  std::string Uuid(int index = 0) const;
  const std::string& name_space() const { return name_space_; }

 private:
  std::string name_space_;
  std::string config_;
};

// A workload's limit file (read-only, as a launcher writes it) and its budget segments, removed
// when the object goes.
class Workload {
 public:
  Workload(const std::string& uuid, unsigned long long limit, unsigned long long context = 0);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  // Environment that puts a process under the limiter for this workload.
  std::map<std::string, std::string> Env() const;
  const std::string& path() const { return path_; }
  const std::string& id() const { return id_; }
  // Bytes the shared budget says the workload holds now.
  unsigned long long Used() const;

 private:
  std::string id_, uuid_, dir_, path_;
};

// A file of the build (`relative` to it: "bin/cuda_probe"), at a path other users can reach: the
// copy tests/suite/reachable_build.sh made when the build is out of their reach, else the build's.
std::string BuildPath(const std::string& relative);
std::string ProbePath();

// Runs `argv` to completion with the current environment plus `env`.
RunResult RunCommand(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env);

// Starts `argv` and returns once it has printed a line containing `ready` (or exited), with its
// pid; the caller kills and reaps it.
pid_t Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& ready, std::string* seen);

std::map<std::string, std::string> Merge(std::map<std::string, std::string> a,
                                         const std::map<std::string, std::string>& b);

// The paths under /dev/shm of the budget segments whose workload name starts with
// `workload_prefix` (a whole workload name followed by "." for one workload's), in /dev/shm and
// in launchers' budget directories ("gpufrac-XXXXXX/gpufrac.<workload>.<uuid>").
std::vector<std::string> BudgetsStartingWith(const std::string& workload_prefix);

}  // namespace gpufrac::testing
