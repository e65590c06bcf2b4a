// Who is at the other end of a TCP connection, for counting connections per caller: a process of
// this machine (a loopback peer) is its user, found as the owner of the peer's socket in
// /proc/net/tcp or /proc/net/tcp6 (the kernel lists every socket of the network namespace with
// its owner's uid); a remote peer is its address. A user on this machine may connect from any
// address of 127.0.0.0/8, so counting loopback peers by address would let one user take every
// connection and make every other local caller share one cap.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace gpufrac::node {

struct TcpPeer {
  std::string name;          // "uid 1000", or the address of a remote peer ("10.0.0.5")
  std::optional<uid_t> uid;  // set for a local peer whose socket was found
};

// The peer of connected TCP socket `fd`, reading `proc_net` (/proc/net of this namespace).
TcpPeer IdentifyTcpPeer(int fd, const std::string& proc_net = "/proc/net");

}  // namespace gpufrac::node
