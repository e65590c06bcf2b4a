// A small HTTP/1.1 server for the node service's API, on a unix socket (callers identified by
// the kernel: SO_PEERCRED) or on TCP (callers must present a bearer token; HTTPS when given a
// certificate). Built on GNU
// libmicrohttpd, which, unlike cpp-httplib, lets a handler see its connection's socket, and the
// peer credentials are the whole basis of the service's access control.
//
// One thread per connection (once it has sent something), so a handler may block (long polls);
// handlers run concurrently and must be thread-safe. Connections are accepted by a thread of
// the server's own, which turns away those over their caller's cap without a thread (HttpLimits).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpufrac::node {

// Who is calling, as the kernel says (unix socket), or a TCP caller with the right token.
struct Caller {
  bool tcp = false;  // true: authenticated by token; uid/gid/pid are then the service's own.
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // "/v1/jobs/12" (no query string)
  std::map<std::string, std::string> query;    // decoded ?a=b&c=d
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  Caller caller;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct UnixListen {
  std::string path;            // Parent directories are created (0755); a stale socket is replaced.
  mode_t mode = 0600;          // Of the socket file.
  std::optional<gid_t> group;  // Group of the socket file (with mode 0660: that group may connect).
};

struct TcpListen {
  std::string address = "127.0.0.1";  // IPv4 or IPv6 literal.
  uint16_t port = 0;                  // 0: any free port (see tcp_port()).
  std::string token;                  // Required ("Authorization: Bearer <token>"); not empty.
  // HTTPS (TLS 1.2 or later) with this certificate (chain) and private key, both PEM; both empty
  // for plain HTTP.
  std::string tls_cert_pem = {};
  std::string tls_key_pem = {};
};

struct HttpLimits {
  size_t max_body_bytes = 1 << 20;  // Larger bodies get 413 before the handler runs.
  // Open at once per listener, all callers together (each holds a thread once it has sent
  // something). A connection past it is answered 503 and closed.
  unsigned max_connections = 1024;
  // Open at once from one caller: a user on the unix socket or on TCP from this machine (found
  // through /proc/net/tcp, whatever loopback address it uses: tcp_peer.h), or one remote address.
  // Root and the service's own user are not counted. The server accepts connections itself and
  // answers one over the cap 503 and closes it there, before it has a thread or a slot, so that
  // one caller's idle, slow or flooding connections cannot lock others out or slow them down.
  unsigned max_connections_per_user = 32;
  unsigned connection_timeout_seconds = 120;  // Of silence; a connection is closed after it.
  // A request's headers must all be in within this (or connection_timeout_seconds, if sooner)
  // of the connection's opening or of the end of the previous request on it, however slowly
  // they trickle in; else the connection is closed, with a 408 unless it has had an answer
  // (then it is an idle kept-alive connection, and its client will reconnect).
  unsigned header_timeout_seconds = 10;
};

class HttpServer {
 public:
  // Starts serving at once on the given listeners (at least one). Errors name the socket or
  // address and the system's reason (e.g. "address already in use").
  static StatusOr<std::unique_ptr<HttpServer>> Start(std::optional<UnixListen> unix_listen,
                                                     std::optional<TcpListen> tcp_listen,
                                                     HttpHandler handler, HttpLimits limits = {});
  ~HttpServer();  // Stops: no handler runs after it returns; removes the socket file.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t tcp_port() const;  // The bound TCP port (0 without TCP).

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::node
