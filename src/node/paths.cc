// Default locations (see paths.h).
#include "node/paths.h"

#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

namespace gpufrac::node {
namespace {

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v && *v ? v : "";
}

std::string HomeDir() {
  if (std::string home = Env("HOME"); !home.empty()) return home;
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &found) == 0 && found) return pw.pw_dir;
  return "/tmp";
}

}  // namespace

std::string DefaultStateDir() {
  if (getuid() == 0) return "/var/lib/gpufrac";
  if (std::string state = Env("XDG_STATE_HOME"); !state.empty()) return state + "/gpufrac";
  return HomeDir() + "/.local/state/gpufrac";
}

std::string DefaultSocketPath() {
  if (getuid() == 0) return kSystemSocket;
  if (std::string run = Env("XDG_RUNTIME_DIR"); !run.empty()) return run + "/gpufrac/gpufracd.sock";
  return DefaultStateDir() + "/gpufracd.sock";
}

std::string StateDirTag(const std::string& state_dir) {
  char tag[9];
  std::snprintf(tag, sizeof(tag), "%08x",
                static_cast<unsigned>(std::hash<std::string>{}(state_dir)));
  return tag;
}

std::string ServiceInstanceName(const std::string& state_dir) {
  return "gpufracd-" + StateDirTag(state_dir);
}

std::string ExecutableDir() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return ".";
  std::string path(exe, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

std::string LimiterLibraryPath() {
  if (std::string env = Env("GPUFRAC_LIBRARY"); !env.empty()) return env;
  return ExecutableDir() + "/../lib/libgpufrac.so";
}

std::string SimgpuDir() {
  if (std::string env = Env("GPUFRAC_SIMGPU_DIR"); !env.empty()) return env;
  return ExecutableDir() + "/../lib/simgpu";
}

std::string SiblingProgram(const std::string& name) { return ExecutableDir() + "/" + name; }

}  // namespace gpufrac::node
