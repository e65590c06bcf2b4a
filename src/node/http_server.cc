// HttpServer on GNU libmicrohttpd: we open the listening sockets ourselves (so that errors name
// the socket and the system's reason, and the unix socket's mode and group are set before anyone
// can connect) and hand them to one MHD daemon per listener.
#include "node/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/log.h"
#include "node/tcp_peer.h"

namespace gpufrac::node {
namespace {

// At most this much of a refused request's body is read and dropped before hanging up.
constexpr uint64_t kMaxDrainBytes = 16 << 20;

std::string ErrnoText(int error) { return std::strerror(error); }

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
      return UnavailableError("cannot create directory " + prefix + " for socket " + socket_path +
                              ": " + ErrnoText(errno));
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
    return UnavailableError("cannot inspect socket " + path + ": " + ErrnoText(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPreconditionError(path +
                                   " exists and is not a socket; remove it or choose another path");
  }
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (probe < 0) return UnavailableError("cannot create a socket: " + ErrnoText(errno));
  int rc = connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  int error = errno;
  close(probe);
  // EAGAIN: a live listener whose backlog is full; still live.
  if (rc == 0 || error == EAGAIN || error == EINPROGRESS) {
    return FailedPreconditionError("another gpufracd is already serving " + path);
  }
  if (error != ECONNREFUSED) {
    return UnavailableError("cannot check existing socket " + path + ": " + ErrnoText(error));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return UnavailableError("cannot remove stale socket " + path + ": " + ErrnoText(errno));
  }
  return OkStatus();
}

struct UnixSocket {
  int fd = -1;
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

  UnixSocket result;
  result.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (result.fd < 0) return UnavailableError("cannot create a socket: " + ErrnoText(errno));
  if (bind(result.fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    Status status = UnavailableError("cannot bind " + path + ": " + ErrnoText(errno));
    close(result.fd);
    return status;
  }
  // Mode and group are applied before listen(): until then a connect() is refused, so nobody
  // slips in under the wider mode bind() created the file with.
  Status status;
  struct stat st;
  if (chmod(path.c_str(), listen_spec.mode) != 0) {
    status = UnavailableError("cannot set the mode of " + path + ": " + ErrnoText(errno));
  } else if (listen_spec.group && chown(path.c_str(), static_cast<uid_t>(-1), *listen_spec.group)) {
    status = UnavailableError("cannot set the group of " + path + " to " +
                              std::to_string(*listen_spec.group) + ": " + ErrnoText(errno));
  } else if (stat(path.c_str(), &st) != 0) {
    status = UnavailableError("cannot inspect socket " + path + ": " + ErrnoText(errno));
  } else if (listen(result.fd, SOMAXCONN) != 0) {
    status = UnavailableError("cannot listen on " + path + ": " + ErrnoText(errno));
  }
  if (!status.ok()) {
    unlink(path.c_str());
    close(result.fd);
    return status;
  }
  result.dev = st.st_dev;
  result.ino = st.st_ino;
  return result;
}

// Returns the listening fd; *port receives the bound port (useful when 0 was asked for).
StatusOr<int> OpenTcpListener(const TcpListen& listen_spec, uint16_t* port) {
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
  int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return UnavailableError("cannot create a socket for " + where + ": " + ErrnoText(errno));
  int one = 1;
  // A restarted service must be able to take its port back while old connections linger.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  Status status;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&storage), length) != 0) {
    status = UnavailableError("cannot listen on " + where + ": " + ErrnoText(errno));
  } else if (listen(fd, SOMAXCONN) != 0) {
    status = UnavailableError("cannot listen on " + where + ": " + ErrnoText(errno));
  } else if (length = sizeof(storage);
             getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) {
    status = UnavailableError("cannot read the port of " + where + ": " + ErrnoText(errno));
  }
  if (!status.ok()) {
    close(fd);
    return status;
  }
  *port = ntohs(storage.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return fd;
}

}  // namespace

// ---- The server ----

struct HttpServer::Impl {
  // What MHD's callbacks get as their closure: which listener a request came in on.
  struct Listener {
    Impl* impl = nullptr;
    bool tcp = false;
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
  std::mutex users_mu;
  std::map<std::string, unsigned> connections_of;  // Open connections per limited caller.
  std::string token;
  std::string tls_cert_pem, tls_key_pem;  // Both empty: plain HTTP on TCP.
  Caller service_caller;                  // What TCP callers are, once authenticated.
  Listener unix_listener{this, false};
  Listener tcp_listener{this, true};
  MHD_Daemon* unix_daemon = nullptr;
  MHD_Daemon* tcp_daemon = nullptr;
  uint16_t tcp_port = 0;
  std::string socket_path;  // Empty without a unix listener.
  dev_t socket_dev = 0;
  ino_t socket_ino = 0;

  ~Impl() {
    // MHD_stop_daemon joins every connection thread, so no handler runs after this; a handler
    // in a long poll delays it until the poll returns (the owner wakes them first).
    if (unix_daemon != nullptr) MHD_stop_daemon(unix_daemon);
    if (tcp_daemon != nullptr) MHD_stop_daemon(tcp_daemon);
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

  // Reads the kernel's word on who is at the other end of a unix connection.
  static bool PeerCredentials(MHD_Connection* connection, Caller* caller) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == nullptr) return false;
    ucred credentials;
    socklen_t length = sizeof(credentials);
    if (getsockopt(info->connect_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
      return false;
    }
    caller->uid = credentials.uid;
    caller->gid = credentials.gid;
    caller->pid = credentials.pid;
    return true;
  }

  // Per connection (MHD's socket context) of a limited caller, from its start to its close.
  struct ConnectionState {
    std::string who;       // "uid 1000", or a remote peer's address
    bool counted = false;  // In connections_of[who].
    bool refused = false;  // Over the caller's limit: answered 503 and closed.
  };

  // Who a connection is counted under; nullopt for root and the service's own user, who are never
  // limited (an administrator can always get in). Unix callers are their uid (SO_PEERCRED), TCP
  // callers their uid when on this machine, else their address (tcp_peer.h).
  std::optional<std::string> CountedAs(const Listener& listener, MHD_Connection* connection) {
    if (!listener.tcp) {
      Caller caller;
      if (!PeerCredentials(connection, &caller) || caller.uid == 0 ||
          caller.uid == service_caller.uid) {
        return std::nullopt;
      }
      return "uid " + std::to_string(caller.uid);
    }
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == nullptr) return std::nullopt;
    TcpPeer peer = IdentifyTcpPeer(info->connect_fd);
    if (peer.uid && (*peer.uid == 0 || *peer.uid == service_caller.uid)) return std::nullopt;
    return peer.name;
  }

  // Counts each caller's open connections, and marks those over the limit.
  static void OnConnection(void* cls, MHD_Connection* connection, void** socket_context,
                           MHD_ConnectionNotificationCode toe) {
    auto* listener = static_cast<Listener*>(cls);
    Impl* impl = listener->impl;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
      std::optional<std::string> who = impl->CountedAs(*listener, connection);
      if (!who) return;
      auto* state = new ConnectionState{.who = *who};
      *socket_context = state;
      std::lock_guard<std::mutex> lock(impl->users_mu);
      unsigned& open = impl->connections_of[state->who];
      if (open >= impl->limits.max_connections_per_user) {
        state->refused = true;
        // It gets its answer as soon as it sends a request, and little time to send one.
        MHD_set_connection_option(connection, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
      } else {
        ++open;
        state->counted = true;
      }
      return;
    }
    auto* state = static_cast<ConnectionState*>(*socket_context);
    if (state == nullptr) return;
    if (state->counted) {
      std::lock_guard<std::mutex> lock(impl->users_mu);
      if (--impl->connections_of[state->who] == 0) impl->connections_of.erase(state->who);
    }
    delete state;
    *socket_context = nullptr;
  }

  // The refusal for a connection over its caller's limit, if it is one.
  std::optional<HttpResponse> OverUserLimit(MHD_Connection* connection) const {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    auto* state = info == nullptr ? nullptr : static_cast<ConnectionState*>(info->socket_context);
    if (state == nullptr || !state->refused) return std::nullopt;
    HttpResponse response = ErrorResponse(
        503, "too many connections from " + state->who + " at once (at most " +
                 std::to_string(limits.max_connections_per_user) + "); close some and try again");
    response.headers.emplace_back(MHD_HTTP_HEADER_CONNECTION, "close");
    return response;
  }

  // First callback of a request (headers in, no body yet): authenticate, check the announced
  // size, gather method, path, query and headers. Returns the refusal, if the request is refused.
  std::optional<HttpResponse> Begin(const Listener& listener, MHD_Connection* connection,
                                    const char* url, const char* method, RequestState* state) {
    Caller& caller = state->request.caller;
    if (std::optional<HttpResponse> refused = OverUserLimit(connection)) return refused;
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
    } else if (!PeerCredentials(connection, &caller)) {
      LogWarning("http: cannot read the peer credentials of a connection: %s",
                 ErrnoText(errno).c_str());
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

  static void OnCompleted(void* /*cls*/, MHD_Connection* /*connection*/, void** con_cls,
                          MHD_RequestTerminationCode /*toe*/) {
    delete static_cast<RequestState*>(*con_cls);
    *con_cls = nullptr;
  }

  // MHD's own messages (malformed requests, timeouts) are of interest only when debugging.
  static void OnLog(void* /*cls*/, const char* format, va_list args) {
    char message[512];
    std::vsnprintf(message, sizeof(message), format, args);
    size_t n = std::strlen(message);
    while (n > 0 && (message[n - 1] == '\n' || message[n - 1] == '\r')) message[--n] = '\0';
    LogDebug("http: %s", message);
  }

  // Serves `fd` with a new daemon. On failure the fd is closed.
  StatusOr<MHD_Daemon*> StartDaemon(int fd, Listener* listener, const std::string& where) {
    struct stat before;
    fstat(fd, &before);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    // TLS on the TCP listener when configured: TLS 1.2 or later, GnuTLS's default ciphers.
    const bool tls = listener->tcp && !tls_cert_pem.empty();
    MHD_OptionItem tls_options[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(tls_cert_pem.c_str())},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(tls_key_pem.c_str())},
        {MHD_OPTION_HTTPS_PRIORITIES, 0,
         const_cast<char*>("NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2")},
        {MHD_OPTION_END, 0, nullptr}};
    MHD_OptionItem no_options[] = {{MHD_OPTION_END, 0, nullptr}};
    if (tls) flags |= MHD_USE_TLS;
    MHD_Daemon* daemon = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &OnRequest, listener, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_NOTIFY_COMPLETED, &OnCompleted, nullptr, MHD_OPTION_NOTIFY_CONNECTION,
        &OnConnection, listener, MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(limits.max_connections),
        MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(limits.connection_timeout_seconds),
        MHD_OPTION_EXTERNAL_LOGGER, &OnLog, nullptr, MHD_OPTION_ARRAY,
        tls ? tls_options : no_options, MHD_OPTION_END);
    if (daemon != nullptr) return daemon;
    // MHD may or may not have closed the socket it was given; close it only if the fd still
    // names the same socket, so that we never close an fd another thread has just opened.
    struct stat after;
    if (fstat(fd, &after) == 0 && after.st_dev == before.st_dev && after.st_ino == before.st_ino) {
      close(fd);
    }
    if (listener->tcp && !tls_cert_pem.empty()) {
      return InvalidArgumentError("cannot start the HTTPS server on " + where +
                                  ": the TLS certificate and key are not a matching PEM pair");
    }
    return UnavailableError("cannot start the HTTP server on " + where);
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
    GPUFRAC_ASSIGN_OR_RETURN(impl->unix_daemon,
                             impl->StartDaemon(socket.fd, &impl->unix_listener, unix_listen->path));
  }
  if (tcp_listen) {
    impl->token = tcp_listen->token;
    impl->tls_cert_pem = tcp_listen->tls_cert_pem;
    impl->tls_key_pem = tcp_listen->tls_key_pem;
    uint16_t port = 0;
    GPUFRAC_ASSIGN_OR_RETURN(int fd, OpenTcpListener(*tcp_listen, &port));
    GPUFRAC_ASSIGN_OR_RETURN(
        impl->tcp_daemon,
        impl->StartDaemon(fd, &impl->tcp_listener,
                          tcp_listen->address + ":" + std::to_string(tcp_listen->port)));
    impl->tcp_port = port;
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;

uint16_t HttpServer::tcp_port() const { return impl_->tcp_port; }

}  // namespace gpufrac::node
