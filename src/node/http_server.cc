// HttpServer on GNU libmicrohttpd: we open the listening sockets ourselves (so that errors name
// the socket and the system's reason, and the unix socket's mode and group are set before anyone
// can connect) and accept on them ourselves, one thread per listener, so that a connection over
// its caller's cap is turned away before MHD gives it a thread; the others are handed to MHD
// once they send something.
#include "node/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/posix.h"
#include "node/tcp_peer.h"

namespace gpufrac::node {
namespace {

// At most this much of a refused request's body is read and dropped before hanging up.
constexpr uint64_t kMaxDrainBytes = 16 << 20;

// A connection turned away by the acceptor is answered and shut for writing at once, but its fd
// is closed only this much later (no thread, nothing polled), so that a client that writes its
// request first still can, and then reads the 503 instead of a broken pipe; at most this many
// per listener wait to be closed (beyond, the oldest is closed at once), so a flood costs one
// accept, one write and one close per connection.
constexpr auto kLinger = std::chrono::milliseconds(500);
constexpr size_t kMaxLingering = 64;
// Accepted in one go before the acceptor looks at its other work (deadlines, lingering).
constexpr int kMaxAcceptsPerWakeup = 256;
constexpr int kAcceptorNice = -10;
// A caller refused again within this of its last 503 is flooding: its connection is closed at
// once, without the text (which it has just been told), which saves the write and the shutdown.
constexpr auto kBareRefusals = std::chrono::milliseconds(1);

// A JSON object {"error": message}; the message is escaped by hand because this library does
// not link a JSON library for one field.
std::string JsonError(std::string_view message) {
  std::string out = "{\"error\": \"";
  for (unsigned char c : message) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"}";
  return out;
}

HttpResponse ErrorResponse(int status, std::string_view message) {
  HttpResponse response;
  response.status = status;
  response.body = JsonError(message);
  return response;
}

// The bytes of a whole error response that closes the connection, for the acceptor to write
// itself, before (or without) MHD.
std::string RawErrorResponse(std::string_view status_line, std::string_view message) {
  const std::string body = JsonError(message);
  return "HTTP/1.1 " + std::string(status_line) +
         "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Reads the kernel's word on who is at the other end of a unix connection.
bool PeerCredentials(int fd, Caller* caller) {
  ucred credentials;
  socklen_t length = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return false;
  caller->uid = credentials.uid;
  caller->gid = credentials.gid;
  caller->pid = credentials.pid;
  return true;
}

void Wake(int event_fd) {
  uint64_t one = 1;
  (void)!write(event_fd, &one, sizeof(one));
}

// Compares in time that depends only on the lengths, so that a TCP caller cannot learn the
// token a byte at a time from response times.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// The token of an "Authorization: Bearer <token>" value (the scheme is case-insensitive, as
// RFC 7235 says), or nothing.
std::optional<std::string_view> BearerToken(const char* authorization) {
  if (authorization == nullptr) return std::nullopt;
  std::string_view value(authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) return std::nullopt;
  }
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  return value;
}

// ---- Listening sockets ----

// mkdir -p with mode 0755 for the directories that are missing.
Status MakeParentDirectories(const std::string& socket_path) {
  size_t slash = socket_path.rfind('/');
  if (slash == std::string::npos || slash == 0) return OkStatus();
  std::string parent = socket_path.substr(0, slash);
  for (size_t pos = 1; pos <= parent.size(); ++pos) {
    if (pos != parent.size() && parent[pos] != '/') continue;
    std::string prefix = parent.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) == 0) {
      chmod(prefix.c_str(), 0755);  // Whatever the umask: callers must reach the socket.
    } else if (errno != EEXIST) {
      return ErrnoStatus("cannot create directory " + prefix + " for socket " + socket_path, errno);
    }
  }
  return OkStatus();
}

bool FillUnixAddress(const std::string& path, sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  if (path.size() >= sizeof(address->sun_path)) return false;
  std::memcpy(address->sun_path, path.c_str(), path.size() + 1);
  return true;
}

// An existing path is replaced only when it is a socket that nobody answers on (left behind by
// a service that died); a live one means another service owns it.
Status RemoveStaleSocket(const std::string& path, const sockaddr_un& address) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return OkStatus();
    return ErrnoStatus("cannot inspect socket " + path, errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPreconditionError(path +
                                   " exists and is not a socket; remove it or choose another path");
  }
  const UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe.valid()) return ErrnoStatus("cannot create a socket", errno);
  const int rc = connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  // EAGAIN: a live listener whose backlog is full; still live.
  if (rc == 0 || error == EAGAIN || error == EINPROGRESS) {
    return FailedPreconditionError("another gpufracd is already serving " + path);
  }
  if (error != ECONNREFUSED) {
    return ErrnoStatus("cannot check existing socket " + path, error);
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("cannot remove stale socket " + path, errno);
  }
  return OkStatus();
}

struct UnixSocket {
  UniqueFd fd;
  dev_t dev = 0;
  ino_t ino = 0;
};

StatusOr<UnixSocket> OpenUnixListener(const UnixListen& listen_spec) {
  const std::string& path = listen_spec.path;
  if (path.empty()) return InvalidArgumentError("the unix socket path is empty");
  sockaddr_un address;
  if (!FillUnixAddress(path, &address)) {
    return InvalidArgumentError("socket path " + path + " is too long (at most " +
                                std::to_string(sizeof(address.sun_path) - 1) + " bytes)");
  }
  GPUFRAC_RETURN_IF_ERROR(MakeParentDirectories(path));
  GPUFRAC_RETURN_IF_ERROR(RemoveStaleSocket(path, address));

  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("cannot create a socket", errno);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return ErrnoStatus("cannot bind " + path, errno);
  }
  // Mode and group are applied before listen(): until then a connect() is refused, so nobody
  // slips in under the wider mode bind() created the file with.
  Status status;
  struct stat st;
  if (chmod(path.c_str(), listen_spec.mode) != 0) {
    status = ErrnoStatus("cannot set the mode of " + path, errno);
  } else if (listen_spec.group && chown(path.c_str(), static_cast<uid_t>(-1), *listen_spec.group)) {
    status = ErrnoStatus(
        "cannot set the group of " + path + " to " + std::to_string(*listen_spec.group), errno);
  } else if (stat(path.c_str(), &st) != 0) {
    status = ErrnoStatus("cannot inspect socket " + path, errno);
  } else if (listen(fd.get(), SOMAXCONN) != 0) {
    status = ErrnoStatus("cannot listen on " + path, errno);
  }
  if (!status.ok()) {
    unlink(path.c_str());
    return status;
  }
  UnixSocket result;
  result.fd = std::move(fd);
  result.dev = st.st_dev;
  result.ino = st.st_ino;
  return result;
}

// Returns the listening fd; *port receives the bound port (useful when 0 was asked for).
StatusOr<UniqueFd> OpenTcpListener(const TcpListen& listen_spec, uint16_t* port) {
  std::string host = listen_spec.address;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string where = listen_spec.address + ":" + std::to_string(listen_spec.port);
  sockaddr_storage storage;
  std::memset(&storage, 0, sizeof(storage));
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(listen_spec.port);
    length = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(listen_spec.port);
    length = sizeof(*v6);
  } else {
    return InvalidArgumentError("TCP address " + listen_spec.address +
                                " is not an IPv4 or IPv6 address");
  }
  UniqueFd fd(socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("cannot create a socket for " + where, errno);
  int one = 1;
  // A restarted service must be able to take its port back while old connections linger.
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&storage), length) != 0 ||
      listen(fd.get(), SOMAXCONN) != 0) {
    return ErrnoStatus("cannot listen on " + where, errno);
  }
  length = sizeof(storage);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&storage), &length) != 0) {
    return ErrnoStatus("cannot read the port of " + where, errno);
  }
  *port = ntohs(storage.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return fd;
}

}  // namespace

// ---- The server ----

struct HttpServer::Impl {
  using Clock = std::chrono::steady_clock;

  // A connection the acceptor turned away: answered and shut for writing, closed at `until`.
  struct Lingering {
    UniqueFd fd;
    Clock::time_point until;
  };

  // An admitted connection that has sent nothing yet: the acceptor polls it and hands it to MHD
  // (which gives it a thread) once it has something to read, so that a caller connecting and
  // hanging up in a loop costs no thread.
  struct Silent {
    UniqueFd fd;
    sockaddr_storage address;
    socklen_t length = 0;
  };

  // One listening socket, the thread that accepts on it and the MHD daemon that serves the
  // connections it admits; also what MHD's callbacks get as their closure.
  struct Listener {
    Listener(Impl* owner, bool is_tcp) : impl(owner), tcp(is_tcp) {}
    Impl* impl;
    bool tcp;
    bool tls = false;
    UniqueFd fd;       // The listening socket (non-blocking); closed by ~Impl.
    UniqueFd wake_fd;  // An eventfd that wakes the acceptor: to stop, or for a sooner deadline.
    MHD_Daemon* daemon = nullptr;
    std::thread acceptor;
    // Under mu: admitted connections not yet closed, and when the acceptor next looks at their
    // header deadlines (the soonest of them).
    unsigned open = 0;
    Clock::time_point next_deadline = Clock::time_point::max();
    // The acceptor thread's own.
    std::deque<Lingering> lingering;
    std::vector<Silent> silent;
  };

  // An admitted connection, from its admission (silent, the acceptor's) until it is closed: by the
  // acceptor after it forgets it, or by MHD after its close notice. Until then its fd names this
  // connection and nothing else.
  struct Admitted {
    Listener* listener = nullptr;
    std::optional<std::string> who;  // Counted in connections_of; none for the unlimited.
    // While it owes the headers of a request: when it is cut off.
    std::optional<Clock::time_point> headers_due;
    // It has had an answer: a late next request is then closed without a 408, which a client
    // would read as the answer to the request it is about to send on its kept-alive connection.
    bool answered = false;
  };

  // Per request (MHD's con_cls), from the first callback to the completion notice.
  struct RequestState {
    HttpRequest request;
    // Set when the request is refused before the handler (401, 413, 500); sent once the body,
    // if any, has been read and dropped (see AnswerAtOnce).
    std::optional<HttpResponse> refusal;
    uint64_t dropped = 0;   // Body bytes read and thrown away because of the refusal.
    bool answered = false;  // A response is queued; later callbacks only drain.
  };

  HttpHandler handler;
  HttpLimits limits;
  // A limited caller's admitted connections (while it has any).
  struct CallerConnections {
    unsigned open = 0;
    Clock::time_point last_told;  // When a connection of theirs was last answered 503.
  };
  std::mutex mu;  // Guards connections_of, admitted and each Listener's open and next_deadline.
  std::map<std::string, CallerConnections> connections_of;
  std::map<int, Admitted> admitted;  // By fd.
  // Held by an acceptor while it enters a connection in `admitted`, and while it hands one to
  // MHD until MHD has taken it (or has failed, closing it, and the entry is forgotten), so that
  // the other listener's acceptor cannot enter a reused fd before the stale entry is gone.
  std::mutex admit_mu;
  std::atomic<bool> stopping{false};
  std::string token;
  std::string tls_cert_pem, tls_key_pem;  // Both empty: plain HTTP on TCP.
  Caller service_caller;                  // What TCP callers are, once authenticated.
  Listener unix_listener{this, false};
  Listener tcp_listener{this, true};
  uint16_t tcp_port = 0;
  std::string socket_path;  // Empty without a unix listener.
  dev_t socket_dev = 0;
  ino_t socket_ino = 0;

  ~Impl() {
    stopping = true;
    for (Listener* listener : {&unix_listener, &tcp_listener}) {
      if (!listener->acceptor.joinable()) continue;
      Wake(listener->wake_fd.get());
      listener->acceptor.join();
    }
    // MHD_stop_daemon joins every connection thread, so no handler runs after this; a handler
    // in a long poll delays it until the poll returns (the owner wakes them first).
    for (Listener* listener : {&unix_listener, &tcp_listener}) {
      if (listener->daemon != nullptr) MHD_stop_daemon(listener->daemon);
      listener->fd.Reset();
      listener->wake_fd.Reset();
    }
    // Only our own socket file: another service may have replaced it since (e.g. after we were
    // thought dead).
    struct stat st;
    if (!socket_path.empty() && lstat(socket_path.c_str(), &st) == 0 && st.st_dev == socket_dev &&
        st.st_ino == socket_ino) {
      unlink(socket_path.c_str());
    }
  }

  static MHD_Result Queue(MHD_Connection* connection, const HttpResponse& response) {
    MHD_Response* reply = MHD_create_response_from_buffer(
        response.body.size(), const_cast<char*>(response.body.data()), MHD_RESPMEM_MUST_COPY);
    if (reply == nullptr) return MHD_NO;
    if (!response.content_type.empty()) {
      MHD_add_response_header(reply, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    }
    for (const auto& [name, value] : response.headers) {
      if (MHD_add_response_header(reply, name.c_str(), value.c_str()) != MHD_YES) {
        LogWarning("http: dropped invalid response header '%s'", name.c_str());
      }
    }
    unsigned status = response.status >= 100 && response.status <= 599
                          ? static_cast<unsigned>(response.status)
                          : MHD_HTTP_INTERNAL_SERVER_ERROR;
    MHD_Result result = MHD_queue_response(connection, status, reply);
    MHD_destroy_response(reply);
    return result;
  }

  static MHD_Result CollectHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* headers = static_cast<std::map<std::string, std::string>*>(cls);
    std::string name(key);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto [it, inserted] = headers->emplace(name, value == nullptr ? "" : value);
    // Repeated headers combine into one comma-separated value, as HTTP defines.
    if (!inserted && value != nullptr) it->second += std::string(", ") + value;
    return MHD_YES;
  }

  static MHD_Result CollectArgument(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* query = static_cast<std::map<std::string, std::string>*>(cls);
    query->emplace(key, value == nullptr ? "" : value);  // The first of repeated keys wins.
    return MHD_YES;
  }

  static int FdOf(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == nullptr ? -1 : info->connect_fd;
  }

  // ---- Admission (on each listener's acceptor thread) ----

  // Who a connection is counted under; nullopt for root and the service's own user, who are never
  // limited (an administrator can always get in). Unix callers are their uid (SO_PEERCRED), TCP
  // callers their uid when on this machine, else their address (tcp_peer.h).
  std::optional<std::string> CountedAs(const Listener& listener, int fd) const {
    if (!listener.tcp) {
      Caller caller;
      // Unknown callers share one count (their requests are refused anyway): a caller goes
      // uncounted only when known to be root or the service's user.
      if (!PeerCredentials(fd, &caller)) return std::string("callers of unknown uid");
      if (caller.uid == 0 || caller.uid == service_caller.uid) return std::nullopt;
      return "uid " + std::to_string(caller.uid);
    }
    TcpPeer peer = IdentifyTcpPeer(fd);
    if (peer.uid && (*peer.uid == 0 || *peer.uid == service_caller.uid)) return std::nullopt;
    return peer.name;
  }

  // Accepts what is waiting (up to kMaxAcceptsPerWakeup) and admits or refuses each. False when
  // the process is out of file descriptors: the acceptor then pauses instead of spinning.
  bool AcceptWaiting(Listener* listener) {
    for (int i = 0; i < kMaxAcceptsPerWakeup; ++i) {
      sockaddr_storage address;
      socklen_t length = sizeof(address);
      UniqueFd fd(accept4(listener->fd.get(), reinterpret_cast<sockaddr*>(&address), &length,
                          SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        LogWarning("http: %s", ErrnoStatus("cannot accept a connection", errno).message().c_str());
        return false;
      }
      Admit(listener, std::move(fd), address, length);
    }
    return true;
  }

  // Admits `fd` (to be handed to MHD once it sends something) if its caller is under the caps,
  // else answers 503 without a thread.
  void Admit(Listener* listener, UniqueFd fd, const sockaddr_storage& address, socklen_t length) {
    std::optional<std::string> who = CountedAs(*listener, fd.get());
    std::unique_lock<std::mutex> admit_lock(admit_mu);
    std::string refusal;
    bool bare = false;  // Refused without the 503's text.
    {
      std::lock_guard<std::mutex> lock(mu);
      const Clock::time_point now = Clock::now();
      auto counted = who ? connections_of.find(*who) : connections_of.end();
      if (listener->open >= limits.max_connections) {
        refusal = "the server is at its limit of " + std::to_string(limits.max_connections) +
                  " open connections; try again shortly";
      } else if (counted != connections_of.end() &&
                 counted->second.open >= limits.max_connections_per_user) {
        refusal = "too many connections from " + *who + " at once (at most " +
                  std::to_string(limits.max_connections_per_user) + "); close some and try again";
        bare = now - counted->second.last_told < kBareRefusals;
        if (!bare) counted->second.last_told = now;
      } else {
        ++listener->open;
        if (who) ++connections_of[*who].open;
        const Clock::time_point due = now + std::chrono::seconds(limits.header_timeout_seconds);
        // An entry still there is a connection MHD closed without its close notice (a setup
        // that failed after MHD_add_connection took it): its slots are given back, and the new
        // connection that got its fd number is the one the entry then names.
        if (admitted.count(fd.get()) != 0) {
          LogWarning("http: a connection was closed without notice; its slots are freed");
          ForgetLocked(fd.get());
        }
        admitted[fd.get()] = Admitted{listener, who, due};
        listener->next_deadline = std::min(listener->next_deadline, due);
      }
    }
    if (!refusal.empty()) {
      admit_lock.unlock();
      if (!bare) Refuse(listener, std::move(fd), refusal);
      return;
    }
    listener->silent.push_back({std::move(fd), address, length});
  }

  // A silent connection has become readable: handed to MHD if it sent something, else (it hung
  // up, or the header deadline shut it) forgotten and closed. False while it is still silent.
  bool HandOver(Listener* listener, Silent& connection) {
    char byte;
    const ssize_t n = recv(connection.fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0) {
      Forget(connection.fd.get());
      connection.fd.Reset();
      return true;
    }
    std::lock_guard<std::mutex> admit_lock(admit_mu);
    // MHD owns it from here, closing it also when it cannot take it.
    const int fd = connection.fd.Release();
    if (MHD_add_connection(listener->daemon, fd,
                           reinterpret_cast<const sockaddr*>(&connection.address),
                           connection.length) != MHD_YES) {
      LogWarning("http: %s", ErrnoStatus("cannot serve a new connection", errno).message().c_str());
      Forget(fd);
    }
    return true;
  }

  // Answers 503 with `message` (on plain HTTP; a TLS client would read noise) and keeps the fd
  // open a moment (see kLinger); never blocks.
  void Refuse(Listener* listener, UniqueFd fd, const std::string& message) {
    if (listener->tls) return;
    const std::string reply = RawErrorResponse("503 Service Unavailable", message);
    (void)!send(fd.get(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(fd.get(), SHUT_WR);
    std::deque<Lingering>& lingering = listener->lingering;
    if (lingering.size() >= kMaxLingering) lingering.pop_front();
    lingering.push_back({std::move(fd), Clock::now() + kLinger});
  }

  // Forgets an admitted connection before its fd is closed (by MHD after its close notice or
  // when it cannot take the connection, or by the acceptor): its slots are free.
  void Forget(int fd) {
    std::lock_guard<std::mutex> lock(mu);
    ForgetLocked(fd);
  }
  void ForgetLocked(int fd) {
    auto it = admitted.find(fd);
    if (it == admitted.end()) return;
    --it->second.listener->open;
    if (it->second.who) {
      auto counted = connections_of.find(*it->second.who);
      if (--counted->second.open == 0) connections_of.erase(counted);
    }
    admitted.erase(it);
  }

  // Cuts off this listener's connections whose request headers are late: shut down, the
  // acceptor (a silent one) or MHD's thread sees the end of input and closes it (the fd is
  // still the connection's, as `admitted` holds it). Returns when the next deadline falls.
  Clock::time_point CutOffLateHeaders(Listener* listener, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu);
    if (now < listener->next_deadline) return listener->next_deadline;
    Clock::time_point next = Clock::time_point::max();
    for (auto& [fd, connection] : admitted) {
      if (connection.listener != listener || !connection.headers_due) continue;
      if (*connection.headers_due > now) {
        next = std::min(next, *connection.headers_due);
        continue;
      }
      if (!listener->tls && !connection.answered) {
        const std::string reply = RawErrorResponse(
            "408 Request Timeout", "the request's headers did not arrive within " +
                                       std::to_string(limits.header_timeout_seconds) + " s");
        (void)!send(fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      shutdown(fd, SHUT_RDWR);
      connection.headers_due.reset();
    }
    listener->next_deadline = next;
    return next;
  }

  // A connection owes (`waiting`) or has delivered a request's headers: from its admission and
  // from the end of each request until the next request's headers are in.
  void AwaitHeaders(MHD_Connection* connection, bool waiting) {
    const int fd = FdOf(connection);
    std::lock_guard<std::mutex> lock(mu);
    auto it = admitted.find(fd);
    if (it == admitted.end()) return;
    if (!waiting) {
      it->second.headers_due.reset();
      return;
    }
    const Clock::time_point due =
        Clock::now() + std::chrono::seconds(limits.header_timeout_seconds);
    it->second.headers_due = due;
    it->second.answered = true;
    Listener* listener = it->second.listener;
    if (due < listener->next_deadline) {
      listener->next_deadline = due;
      Wake(listener->wake_fd.get());
    }
  }

  // The acceptor: accepts as fast as connections come (the listen queue is drained each
  // wakeup, so one caller's flood cannot leave others' connects to a full queue), closes the
  // refused connections when their time is up and enforces the header deadline.
  void AcceptLoop(Listener* listener) {
    // Ahead of users' processes (where the service may raise itself: as root): however much CPU
    // a flooding caller burns, the thread that turns its connections away keeps up with it, so
    // that the listen queue does not fill and others' connects do not fail. Not on TCP, where
    // identifying a local caller reads /proc/net/tcp, work that grows with the machine's sockets.
    if (!listener->tcp) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kAcceptorNice);
    std::deque<Lingering>& lingering = listener->lingering;
    std::vector<Silent>& silent = listener->silent;
    std::vector<pollfd> fds;
    Clock::time_point paused_until;  // Out of file descriptors: no accepting until then.
    while (!stopping) {
      Clock::time_point now = Clock::now();
      Clock::time_point next = CutOffLateHeaders(listener, now);
      while (!lingering.empty() && lingering.front().until <= now) lingering.pop_front();
      if (!lingering.empty()) next = std::min(next, lingering.front().until);
      const bool paused = paused_until > now;
      if (paused) next = std::min(next, paused_until);
      fds.clear();
      fds.push_back({listener->wake_fd.get(), POLLIN, 0});
      fds.push_back({paused ? -1 : listener->fd.get(), POLLIN, 0});
      for (const Silent& connection : silent) fds.push_back({connection.fd.get(), POLLIN, 0});
      int timeout_ms = -1;
      if (next != Clock::time_point::max()) {
        timeout_ms =
            static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
      }
      if (poll(fds.data(), fds.size(), timeout_ms) < 0) continue;  // EINTR
      if (fds[0].revents != 0) {
        uint64_t count;
        (void)!read(listener->wake_fd.get(), &count, sizeof(count));
      }
      size_t kept = 0;
      for (size_t i = 0; i < silent.size(); ++i) {
        if (fds[2 + i].revents != 0 && HandOver(listener, silent[i])) continue;
        if (kept != i) silent[kept] = std::move(silent[i]);
        ++kept;
      }
      silent.resize(kept);
      if (fds[1].revents != 0 && !AcceptWaiting(listener)) {
        paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
    }
    lingering.clear();
    // Forgotten before closed: until then the fd names the connection `admitted` counts.
    for (const Silent& connection : silent) Forget(connection.fd.get());
    silent.clear();
  }

  // MHD's notice that an admitted connection is closing (before it closes the socket).
  static void OnConnection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                           MHD_ConnectionNotificationCode toe) {
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
      static_cast<Listener*>(cls)->impl->Forget(FdOf(connection));
    }
  }

  // First callback of a request (headers in, no body yet): authenticate, check the announced
  // size, gather method, path, query and headers. Returns the refusal, if the request is refused.
  std::optional<HttpResponse> Begin(const Listener& listener, MHD_Connection* connection,
                                    const char* url, const char* method, RequestState* state) {
    Caller& caller = state->request.caller;
    if (listener.tcp) {
      std::optional<std::string_view> presented = BearerToken(
          MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
      if (!presented || !ConstantTimeEquals(*presented, token)) {
        HttpResponse response = ErrorResponse(
            401, presented ? "invalid bearer token" : "missing \"Authorization: Bearer\" token");
        response.headers.emplace_back(MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                      "Bearer realm=\"gpufracd\"");
        return response;
      }
      caller = service_caller;
    } else if (!PeerCredentials(FdOf(connection), &caller)) {
      LogWarning(
          "http: %s",
          ErrnoStatus("cannot read the peer credentials of a connection", errno).message().c_str());
      return ErrorResponse(500, "cannot identify the caller");
    }

    const char* length =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length != nullptr) {
      char* end = nullptr;
      errno = 0;
      unsigned long long announced = std::strtoull(length, &end, 10);
      if (errno == 0 && end != length && announced > limits.max_body_bytes) return TooLarge();
    }

    state->request.method = method;
    state->request.path = url;
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &CollectArgument,
                              &state->request.query);
    MHD_get_connection_values(connection, MHD_HEADER_KIND, &CollectHeader, &state->request.headers);
    return std::nullopt;
  }

  HttpResponse TooLarge() const {
    return ErrorResponse(
        413, "request body is larger than " + std::to_string(limits.max_body_bytes) + " bytes");
  }

  // A refusal is normally sent only after the client's body has been read (and dropped): a
  // server that answers and closes while the client is still writing makes the client's write
  // fail (EPIPE, or a TCP reset that discards our answer), so the caller would never see why.
  // It goes out at once when the client waits for "100 Continue" before sending its body, or
  // announces more than we are willing to read for nothing.
  static bool AnswerAtOnce(MHD_Connection* connection) {
    const char* expect =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (expect != nullptr && strcasecmp(expect, "100-continue") == 0) return true;
    const char* length =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return length != nullptr && std::strtoull(length, nullptr, 10) > kMaxDrainBytes;
  }

  HttpResponse Run(const HttpRequest& request) {
    try {
      return handler(request);
    } catch (const std::exception& e) {
      LogError("http: handler for %s %s threw: %s", request.method.c_str(), request.path.c_str(),
               e.what());
    } catch (...) {
      LogError("http: handler for %s %s threw a non-exception", request.method.c_str(),
               request.path.c_str());
    }
    return ErrorResponse(500, "internal error");
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/, const char* upload_data,
                              size_t* upload_data_size, void** con_cls) {
    auto* listener = static_cast<Listener*>(cls);
    Impl* impl = listener->impl;
    auto* state = static_cast<RequestState*>(*con_cls);
    if (state == nullptr) {
      state = new RequestState();
      *con_cls = state;  // Freed by OnCompleted, whatever happens next.
      impl->AwaitHeaders(connection, false);
      state->refusal = impl->Begin(*listener, connection, url, method, state);
      if (state->refusal && AnswerAtOnce(connection)) {
        state->answered = true;
        return Queue(connection, *state->refusal);
      }
      return MHD_YES;
    }
    if (*upload_data_size > 0) {
      size_t size = *upload_data_size;
      *upload_data_size = 0;
      if (!state->refusal && size > impl->limits.max_body_bytes - state->request.body.size()) {
        state->refusal = impl->TooLarge();
        state->dropped = state->request.body.size();
        std::string().swap(state->request.body);
      }
      if (state->refusal || state->answered) {
        state->dropped += size;
        return state->dropped > kMaxDrainBytes ? MHD_NO : MHD_YES;  // MHD_NO: hang up.
      }
      state->request.body.append(upload_data, size);
      return MHD_YES;
    }
    if (state->answered) return MHD_YES;
    state->answered = true;
    if (state->refusal) return Queue(connection, *state->refusal);
    return Queue(connection, impl->Run(state->request));
  }

  // A request is done; a kept-alive connection owes the next one's headers.
  static void OnCompleted(void* cls, MHD_Connection* connection, void** con_cls,
                          MHD_RequestTerminationCode /*toe*/) {
    delete static_cast<RequestState*>(*con_cls);
    *con_cls = nullptr;
    static_cast<Impl*>(cls)->AwaitHeaders(connection, true);
  }

  // MHD's own messages (malformed requests, timeouts) are of interest only when debugging.
  static void OnLog(void* /*cls*/, const char* format, va_list args) {
    char message[512];
    std::vsnprintf(message, sizeof(message), format, args);
    size_t n = std::strlen(message);
    while (n > 0 && (message[n - 1] == '\n' || message[n - 1] == '\r')) message[--n] = '\0';
    LogDebug("http: %s", message);
  }

  // Serves listening socket `fd` (taken over: closed by ~Impl, whatever happens) with an MHD
  // daemon fed by a new acceptor thread.
  Status StartListener(UniqueFd fd, Listener* listener, const std::string& where) {
    listener->fd = std::move(fd);
    listener->tls = listener->tcp && !tls_cert_pem.empty();
    const int listening = listener->fd.get();
    if (fcntl(listening, F_SETFL, fcntl(listening, F_GETFL) | O_NONBLOCK) != 0) {
      return ErrnoStatus("cannot start the HTTP server on " + where, errno);
    }
    listener->wake_fd.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!listener->wake_fd.valid()) {
      return ErrnoStatus("cannot start the HTTP server on " + where, errno);
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG;
    // TLS on the TCP listener when configured: TLS 1.2 or later, GnuTLS's default ciphers.
    MHD_OptionItem tls_options[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(tls_cert_pem.c_str())},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(tls_key_pem.c_str())},
        {MHD_OPTION_HTTPS_PRIORITIES, 0,
         const_cast<char*>("NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2")},
        {MHD_OPTION_END, 0, nullptr}};
    MHD_OptionItem no_options[] = {{MHD_OPTION_END, 0, nullptr}};
    if (listener->tls) flags |= MHD_USE_TLS;
    // The acceptor enforces max_connections; MHD's own limit is only a backstop, set above it
    // because MHD counts a connection a little longer (until its thread is joined).
    const unsigned mhd_limit = 2 * limits.max_connections + 16;
    listener->daemon = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &OnRequest, listener, MHD_OPTION_NOTIFY_COMPLETED, &OnCompleted,
        this, MHD_OPTION_NOTIFY_CONNECTION, &OnConnection, listener, MHD_OPTION_CONNECTION_LIMIT,
        mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        static_cast<unsigned>(limits.connection_timeout_seconds), MHD_OPTION_EXTERNAL_LOGGER,
        &OnLog, nullptr, MHD_OPTION_ARRAY, listener->tls ? tls_options : no_options,
        MHD_OPTION_END);
    if (listener->daemon == nullptr) {
      if (listener->tls) {
        return InvalidArgumentError("cannot start the HTTPS server on " + where +
                                    ": the TLS certificate and key are not a matching PEM pair");
      }
      return UnavailableError("cannot start the HTTP server on " + where);
    }
    listener->acceptor = std::thread([this, listener] { AcceptLoop(listener); });
    return OkStatus();
  }
};

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(std::optional<UnixListen> unix_listen,
                                                        std::optional<TcpListen> tcp_listen,
                                                        HttpHandler handler, HttpLimits limits) {
  if (!unix_listen && !tcp_listen) {
    return InvalidArgumentError("the HTTP server needs a unix socket or a TCP address");
  }
  if (!handler) return InvalidArgumentError("the HTTP server needs a handler");
  if (tcp_listen && tcp_listen->tls_cert_pem.empty() != tcp_listen->tls_key_pem.empty()) {
    return InvalidArgumentError("TLS on " + tcp_listen->address +
                                " needs both a certificate and its key");
  }
  if (tcp_listen && !tcp_listen->tls_cert_pem.empty() &&
      MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    return UnavailableError("this libmicrohttpd was built without TLS");
  }
  if (tcp_listen && tcp_listen->token.empty()) {
    return InvalidArgumentError("serving on TCP " + tcp_listen->address +
                                " requires a token; none was given");
  }
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  impl->limits = limits;
  // A connection waiting for its headers is idle as well (and a silent one is not MHD's yet, so
  // MHD's idle timeout cannot close it): the header deadline is the sooner of the two.
  impl->limits.header_timeout_seconds =
      std::min(limits.header_timeout_seconds, limits.connection_timeout_seconds);
  impl->service_caller.tcp = true;
  impl->service_caller.uid = geteuid();
  impl->service_caller.gid = getegid();
  impl->service_caller.pid = getpid();

  if (unix_listen) {
    GPUFRAC_ASSIGN_OR_RETURN(UnixSocket socket, OpenUnixListener(*unix_listen));
    // From here the Impl owns the file: any later failure removes it again.
    impl->socket_path = unix_listen->path;
    impl->socket_dev = socket.dev;
    impl->socket_ino = socket.ino;
    GPUFRAC_RETURN_IF_ERROR(
        impl->StartListener(std::move(socket.fd), &impl->unix_listener, unix_listen->path));
  }
  if (tcp_listen) {
    impl->token = tcp_listen->token;
    impl->tls_cert_pem = tcp_listen->tls_cert_pem;
    impl->tls_key_pem = tcp_listen->tls_key_pem;
    uint16_t port = 0;
    GPUFRAC_ASSIGN_OR_RETURN(UniqueFd fd, OpenTcpListener(*tcp_listen, &port));
    GPUFRAC_RETURN_IF_ERROR(
        impl->StartListener(std::move(fd), &impl->tcp_listener,
                            tcp_listen->address + ":" + std::to_string(tcp_listen->port)));
    impl->tcp_port = port;
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;

uint16_t HttpServer::tcp_port() const { return impl_->tcp_port; }

}  // namespace gpufrac::node
