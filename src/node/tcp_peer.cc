#include "node/tcp_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace gpufrac::node {
namespace {

// The kernel prints an address as its 32-bit words in memory order, each as %08X of the word's
// value, then ":%04X" of the port in host order ("0100007F:1F90" is 127.0.0.1:8080 on x86).
std::string ProcAddress(const void* address, size_t words, uint16_t port) {
  std::string text;
  char buf[16];
  for (size_t i = 0; i < words; ++i) {
    uint32_t word;
    std::memcpy(&word, static_cast<const char*>(address) + 4 * i, 4);
    std::snprintf(buf, sizeof(buf), "%08X", word);
    text += buf;
  }
  std::snprintf(buf, sizeof(buf), ":%04X", ntohs(port));
  return text + buf;
}

// The uid of the socket whose local end is `local` and remote end `remote` in `table`.
std::optional<uid_t> SocketOwner(const std::string& table, const std::string& local,
                                 const std::string& remote) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, line_local, line_remote, state, queues, timer, retransmits;
    long long uid = -1;
    if (fields >> slot >> line_local >> line_remote >> state >> queues >> timer >> retransmits >>
            uid &&
        line_local == local && line_remote == remote && uid >= 0) {
      return static_cast<uid_t>(uid);
    }
  }
  return std::nullopt;
}

}  // namespace

TcpPeer IdentifyTcpPeer(int fd, const std::string& proc_net) {
  sockaddr_storage peer{}, self{};
  socklen_t peer_len = sizeof(peer), self_len = sizeof(self);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) {
    return {"an unknown peer", std::nullopt};
  }
  char text[INET6_ADDRSTRLEN] = "?";
  std::optional<uid_t> uid;
  if (peer.ss_family == AF_INET) {
    const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
    const auto& s = reinterpret_cast<const sockaddr_in&>(self);
    inet_ntop(AF_INET, &p.sin_addr, text, sizeof(text));
    if ((ntohl(p.sin_addr.s_addr) >> 24) == 127) {
      // The peer's socket: its local end is our remote end.
      uid = SocketOwner(proc_net + "/tcp", ProcAddress(&p.sin_addr, 1, p.sin_port),
                        ProcAddress(&s.sin_addr, 1, s.sin_port));
    }
  } else if (peer.ss_family == AF_INET6) {
    const auto& p = reinterpret_cast<const sockaddr_in6&>(peer);
    const auto& s = reinterpret_cast<const sockaddr_in6&>(self);
    inet_ntop(AF_INET6, &p.sin6_addr, text, sizeof(text));
    const bool v4_loopback = IN6_IS_ADDR_V4MAPPED(&p.sin6_addr) && p.sin6_addr.s6_addr[12] == 127;
    if (IN6_IS_ADDR_LOOPBACK(&p.sin6_addr) || v4_loopback) {
      uid = SocketOwner(proc_net + "/tcp6", ProcAddress(&p.sin6_addr, 4, p.sin6_port),
                        ProcAddress(&s.sin6_addr, 4, s.sin6_port));
      if (!uid && v4_loopback) {  // the client's socket is an IPv4 one
        uid = SocketOwner(proc_net + "/tcp", ProcAddress(&p.sin6_addr.s6_addr[12], 1, p.sin6_port),
                          ProcAddress(&s.sin6_addr.s6_addr[12], 1, s.sin6_port));
      }
    }
  }
  if (uid) return {"uid " + std::to_string(*uid), uid};
  return {text, std::nullopt};
}

}  // namespace gpufrac::node
