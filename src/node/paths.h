// Where gpufrac's files are: the service's default state directory and socket (system-wide for
// root, per user otherwise), and the programs and libraries installed next to the executables.
#pragma once

#include <string>

namespace gpufrac::node {

// Root: /var/lib/gpufrac. Others: $XDG_STATE_HOME/gpufrac or ~/.local/state/gpufrac.
std::string DefaultStateDir();
// The system service's socket: /run/gpufrac/gpufracd.sock.
inline constexpr const char kSystemSocket[] = "/run/gpufrac/gpufracd.sock";
// Root: kSystemSocket. Others: $XDG_RUNTIME_DIR/gpufrac/gpufracd.sock, or gpufracd.sock in
// DefaultStateDir() when there is no runtime directory.
std::string DefaultSocketPath();

// A short tag that tells one state directory's service apart from another's on the same machine
// (8 hex digits of a hash of the path): names its workloads' budgets and its simulated machine.
std::string StateDirTag(const std::string& state_dir);

// The name the service on `state_dir` goes by ("gpufracd-<tag>"): its simulated machine's name,
// and the prefix of its workloads' names ("<name>-<job id>"), so of their budgets' names too.
std::string ServiceInstanceName(const std::string& state_dir);

// The directory of the running executable (from /proc/self/exe).
std::string ExecutableDir();
// libgpufrac.so: $GPUFRAC_LIBRARY, else ../lib/libgpufrac.so next to the executable.
std::string LimiterLibraryPath();
// The simulated driver's libraries: $GPUFRAC_SIMGPU_DIR, else ../lib/simgpu next to the
// executable.
std::string SimgpuDir();
// A program installed next to the running executable (gpufracd, gpufrac-shim, gpufrac).
std::string SiblingProgram(const std::string& name);

}  // namespace gpufrac::node
