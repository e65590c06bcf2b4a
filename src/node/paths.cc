// The service's default locations (see paths.h).
#include "node/paths.h"

#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/paths.h"

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

std::string ServiceInstanceName(const std::string& state_dir) {
  return "gpufracd-" + StateDirTag(state_dir);
}

}  // namespace gpufrac::node
