// The node service's default state directory and socket (system-wide for root, per user
// otherwise), and the name its instance goes by. (Installed programs: common/paths.h.)
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

// The name the service on `state_dir` goes by ("gpufracd-<tag>"): its simulated machine's name,
// and the prefix of its workloads' names ("<name>-<job id>"), so of their budgets' names too.
std::string ServiceInstanceName(const std::string& state_dir);

}  // namespace gpufrac::node
