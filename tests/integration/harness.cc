// Implementation of the limiter/CLI test harness (see harness.h).
#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "limiter/budget.h"
#include "limiter/limit_config.h"

namespace gpufrac::testing {
namespace {

std::atomic<int> g_counter{0};

std::string Unique(const char* prefix) {
  return std::string(prefix) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(g_counter.fetch_add(1));
}

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

// fork + exec with `env` added; stdout/stderr to the given fds.
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            int out_fd, int err_fd) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, SIG_IGN);  // a reader that stopped listening must not kill the child
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

int StatusOf(int raw) {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return -1;
}

}  // namespace

std::string RunResult::Get(const std::string& key) const {
  std::string needle = key + "=";
  for (size_t pos = out.find(needle); pos != std::string::npos; pos = out.find(needle, pos + 1)) {
    if (pos == 0 || out[pos - 1] == ' ' || out[pos - 1] == '\n') {
      size_t start = pos + needle.size();
      size_t end = out.find_first_of(" \n", start);
      return out.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
  }
  return "";
}

long long RunResult::GetInt(const std::string& key) const {
  std::string v = Get(key);
  return v.empty() ? -999999 : std::stoll(v);
}

// The copy of the build that other users can reach, when the build itself is out of their reach
// (tests/suite/reachable_build.sh records it; "" when there is none).
const std::string& ReachableCopy() {
  static const std::string copy = [] {
    std::ifstream record(std::string(GPUFRAC_BUILD_DIR) + "/reachable-build");
    std::string path;
    std::getline(record, path);
    return path;
  }();
  return copy;
}

std::string BuildPath(const std::string& relative) {
  const std::string& copy = ReachableCopy();
  if (!copy.empty() && access((copy + "/" + relative).c_str(), F_OK) == 0) {
    return copy + "/" + relative;
  }
  return std::string(GPUFRAC_BUILD_DIR) + "/" + relative;
}
std::string ProbePath() { return BuildPath("bin/cuda_probe"); }

std::map<std::string, std::string> Merge(std::map<std::string, std::string> a,
                                         const std::map<std::string, std::string>& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

std::vector<std::string> BudgetsStartingWith(const std::string& workload_prefix) {
  std::vector<std::string> found;
  const std::string prefix = "gpufrac." + workload_prefix;  // as limiter::BudgetName names them
  auto scan = [&](const std::string& dir, const std::string& shown) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0) found.push_back(shown + name);
    }
  };
  scan("/dev/shm", "");
  // Launchers' budget directories (launch/budget_dir.h).
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("gpufrac-", 0) == 0 && entry.is_directory(ec) && !entry.is_symlink(ec)) {
      scan(entry.path().string(), name + "/");
    }
  }
  return found;
}

SimMachine::SimMachine(std::string config) : name_space_(Unique("t")), config_(std::move(config)) {}

SimMachine::~SimMachine() {
  shm_unlink(("/simgpu." + name_space_).c_str());  // as simgpu::SharedMemoryName names it
}

std::map<std::string, std::string> SimMachine::Env() const {
  return {{"LD_LIBRARY_PATH", BuildPath("lib/simgpu")},
          {"SIMGPU_NAMESPACE", name_space_},
          {"SIMGPU_CONFIG", config_}};
}

std::string SimMachine::Uuid(int index) const {
  auto env = Env();
  env["CUDA_VISIBLE_DEVICES"] = std::to_string(index);
  return RunCommand({ProbePath(), "uuid"}, env).Get("uuid");
}

Workload::Workload(const std::string& uuid, unsigned long long limit, unsigned long long context)
    : id_(Unique("w")), uuid_(uuid) {
  char tmpl[] = "/tmp/gpufrac-test-XXXXXX";
  dir_ = mkdtemp(tmpl);
  path_ = dir_ + "/limits";
  std::ostringstream text;
  text << "gpufrac-limits 1\nworkload " << id_ << "\ngpu " << uuid << " limit " << limit
       << " context " << context << "\n";
  FILE* f = fopen(path_.c_str(), "w");
  fputs(text.str().c_str(), f);
  fclose(f);
  chmod(path_.c_str(), 0444);
}

Workload::~Workload() {
  char name[200];
  limiter::BudgetName(id_.c_str(), uuid_.c_str(), name, sizeof(name));
  limiter::Budget::Unlink(name);
  unlink(path_.c_str());
  rmdir(dir_.c_str());
}

std::map<std::string, std::string> Workload::Env() const {
  return {{"LD_PRELOAD", BuildPath("lib/libgpufrac.so")}, {"GPUFRAC_LIMIT_FILE", path_}};
}

unsigned long long Workload::Used() const {
  char name[200], err[256];
  limiter::BudgetName(id_.c_str(), uuid_.c_str(), name, sizeof(name));
  limiter::Budget b;
  if (!b.Attach(name, err, sizeof(err))) return ~0ull;
  unsigned long long used = b.used();
  b.Close();
  return used;
}

RunResult RunCommand(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env) {
  // Files rather than pipes: no deadlock however much the child prints.
  char out_path[] = "/tmp/gpufrac-out-XXXXXX";
  char err_path[] = "/tmp/gpufrac-err-XXXXXX";
  int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  pid_t pid = Spawn(argv, env, out_fd, err_fd);
  int raw = 0;
  waitpid(pid, &raw, 0);
  RunResult r;
  r.status = StatusOf(raw);
  lseek(out_fd, 0, SEEK_SET);
  lseek(err_fd, 0, SEEK_SET);
  r.out = ReadAll(out_fd);
  r.err = ReadAll(err_fd);
  close(out_fd);
  close(err_fd);
  unlink(out_path);
  unlink(err_path);
  return r;
}

pid_t Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& ready, std::string* seen) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = Spawn(argv, env, fds[1], 2);
  close(fds[1]);
  std::string text;
  char buf[256];
  ssize_t n;
  while (text.find(ready) == std::string::npos && (n = read(fds[0], buf, sizeof(buf))) > 0) {
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (seen) *seen = text;
  return pid;
}

}  // namespace gpufrac::testing
