// HttpServer over real sockets: requests and responses round-trip, the kernel's peer credentials
// reach the handler, the socket file is managed safely (mode, group, stale and live sockets,
// removal), TCP requires the token, limits, slow handlers, throwing handlers and garbage input
// leave the server serving, and one user's connection flood leaves another's latency alone.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "node/http_server.h"

namespace gpufrac::node {
namespace {

using std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  return address;
}

// fork(); the child becomes user nobody (or exits 3).
pid_t ForkAsNobody() {
  pid_t pid = fork();
  if (pid == 0 && (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(kNobody) != 0)) {
    _exit(3);
  }
  return pid;
}

// Connects to a unix socket; -1 with errno set on failure.
int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un address = UnixAddress(path);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

// Writes `bytes` on a fresh connection (then, with `half_close`, ends the input) and returns
// whatever comes back until the server closes (or 5 s pass).
std::string RawExchange(const std::string& path, const std::string& bytes,
                        bool half_close = false) {
  int fd = ConnectUnix(path);
  if (fd < 0) return "connect failed: " + std::string(std::strerror(errno));
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return "write failed";
  }
  if (half_close) shutdown(fd, SHUT_WR);
  std::string reply;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) reply.append(buffer, n);
  close(fd);
  return reply;
}

UnixListen At(const std::string& path, mode_t mode = 0600,
              std::optional<gid_t> group = std::nullopt) {
  UnixListen listen;
  listen.path = path;
  listen.mode = mode;
  listen.group = group;
  return listen;
}

httplib::Client UnixClient(const std::string& path) {
  httplib::Client client(path, 80);
  client.set_address_family(AF_UNIX);
  client.set_read_timeout(10, 0);
  return client;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // cpp-httplib's client writes without MSG_NOSIGNAL: a server that hangs up while a client
    // is still writing (a refused, oversized upload) would otherwise kill the test.
    signal(SIGPIPE, SIG_IGN);
    char pattern[] = "/tmp/gpufrac-http-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr) << std::strerror(errno);
    dir_ = pattern;
    // Other users (the setuid child below) must be able to reach sockets in here.
    chmod(dir_.c_str(), 0755);
    socket_ = dir_ + "/run/gpufrac/api.sock";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A handler that records the last request and echoes a summary of it.
  HttpHandler Recorder() {
    return [this](const HttpRequest& request) {
      std::lock_guard<std::mutex> lock(mu_);
      last_ = request;
      ++calls_;
      HttpResponse response;
      response.body = "uid=" + std::to_string(request.caller.uid);
      return response;
    };
  }
  HttpRequest Last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  int Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  std::unique_ptr<HttpServer> StartUnix(UnixListen listen, HttpHandler handler,
                                        HttpLimits limits = {}) {
    StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(std::move(listen), std::nullopt, std::move(handler), limits);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  std::string dir_;
  std::string socket_;
  std::mutex mu_;
  HttpRequest last_;
  int calls_ = 0;
};

TEST_F(HttpServerTest, RoundTripsMethodPathQueryHeadersAndBody) {
  auto server = StartUnix(At(socket_), [this](const HttpRequest& request) {
    Recorder()(request);
    HttpResponse response;
    response.status = 201;
    response.content_type = "text/plain";
    response.body = "created " + request.body;
    response.headers.emplace_back("X-Job", "12");
    return response;
  });
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->tcp_port(), 0);

  httplib::Client client = UnixClient(socket_);
  auto result = client.Post("/v1/jobs/12?name=a%20b&plus=x%2By&empty=&flag",
                            {{"X-Custom-Header", "Value"}}, "hello", "application/json");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 201);
  EXPECT_EQ(result->body, "created hello");
  EXPECT_EQ(result->get_header_value("X-Job"), "12");
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/plain");

  HttpRequest seen = Last();
  EXPECT_EQ(seen.method, "POST");
  EXPECT_EQ(seen.path, "/v1/jobs/12");
  std::map<std::string, std::string> query = {
      {"name", "a b"}, {"plus", "x+y"}, {"empty", ""}, {"flag", ""}};
  EXPECT_EQ(seen.query, query);
  EXPECT_EQ(seen.headers["x-custom-header"], "Value");
  EXPECT_EQ(seen.headers["content-type"], "application/json");
  EXPECT_EQ(seen.headers.count("X-Custom-Header"), 0u);
  EXPECT_EQ(seen.body, "hello");
  EXPECT_FALSE(seen.caller.tcp);
  EXPECT_EQ(seen.caller.uid, getuid());
  EXPECT_EQ(seen.caller.gid, getgid());
  EXPECT_EQ(seen.caller.pid, getpid());

  auto get = client.Get("/metrics");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 201);
  EXPECT_EQ(Last().method, "GET");
  EXPECT_EQ(Last().path, "/metrics");
  EXPECT_TRUE(Last().query.empty());
  EXPECT_EQ(Last().body, "");
}

TEST_F(HttpServerTest, CreatesParentDirectoriesAndAppliesModeAndGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "changing a socket's group needs root";
  auto server = StartUnix(At(socket_, 0660, kNogroup), Recorder());
  ASSERT_NE(server, nullptr);
  struct stat st;
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, kNogroup);
  for (const std::string& d : {dir_ + "/run", dir_ + "/run/gpufrac"}) {
    ASSERT_EQ(stat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0755u) << d;
  }
}

TEST_F(HttpServerTest, DefaultModeIsOwnerOnly) {
  auto server = StartUnix(At(socket_), Recorder());
  ASSERT_NE(server, nullptr);
  struct stat st;
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// Forks a child that becomes uid 65534 with the given gid, sends one GET and exits 0 when the
// answer is 200 with "uid=65534", 2 when connect() fails with EACCES, 1 otherwise. Only
// async-signal-safe calls in the child: the test process has threads.
int RequestAsNobody(const std::string& path, gid_t gid, pid_t* child_pid) {
  const std::string request =
      "GET /whoami HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  sockaddr_un address;
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(kNobody) != 0) _exit(3);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) _exit(1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      _exit(errno == EACCES ? 2 : 1);
    }
    if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) _exit(1);
    char reply[4096];
    size_t used = 0;
    ssize_t n;
    while (used < sizeof(reply) - 1 && (n = read(fd, reply + used, sizeof(reply) - 1 - used)) > 0) {
      used += n;
    }
    reply[used] = '\0';
    bool ok = std::strncmp(reply, "HTTP/1.1 200", 12) == 0 && std::strstr(reply, "uid=65534");
    _exit(ok ? 0 : 1);
  }
  *child_pid = pid;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(HttpServerTest, HandlerSeesAnotherUsersCredentials) {
  if (geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  auto server = StartUnix(At(socket_, 0666), Recorder());
  ASSERT_NE(server, nullptr);
  pid_t child = 0;
  ASSERT_EQ(RequestAsNobody(socket_, kNogroup, &child), 0);
  HttpRequest seen = Last();
  EXPECT_EQ(seen.path, "/whoami");
  EXPECT_EQ(seen.caller.uid, kNobody);
  EXPECT_EQ(seen.caller.gid, kNogroup);
  EXPECT_EQ(seen.caller.pid, child);
  EXPECT_FALSE(seen.caller.tcp);
}

TEST_F(HttpServerTest, GroupModeAdmitsTheGroupOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  auto server = StartUnix(At(socket_, 0660, kNogroup), Recorder());
  ASSERT_NE(server, nullptr);
  pid_t child = 0;
  EXPECT_EQ(RequestAsNobody(socket_, kNogroup, &child), 0);
  EXPECT_EQ(Last().caller.uid, kNobody);
  EXPECT_EQ(RequestAsNobody(socket_, kNogroup - 1, &child), 2);  // Not in the group: EACCES.
  EXPECT_EQ(Calls(), 1);
}

// As uid `uid` (in a child), sends GET /whoami on a fresh connection and returns the reply.
// What `body` returns, run in a child that became user `uid` (group: the same number).
std::string AsUser(uid_t uid, const std::function<std::string()>& body) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(3);
    const std::string reply = body();
    (void)!write(out[1], reply.data(), reply.size());
    _exit(0);
  }
  close(out[1]);
  std::string reply;
  char buffer[4096];
  ssize_t n;
  while ((n = read(out[0], buffer, sizeof(buffer))) > 0) reply.append(buffer, n);
  close(out[0]);
  waitpid(pid, nullptr, 0);
  return reply;
}

std::string RequestAs(const std::string& path, uid_t uid) {
  return AsUser(uid, [&] {
    return RawExchange(path, "GET /whoami HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\r\n");
  });
}

// A process of user nobody that opens connections with `connect_one` (up to `count`), each
// trickling a request a byte at a time as a slow client would, and holds them until LetGo. It
// reports how many it opened and how many the server closed at once (waiting until all but `cap`
// are closed, or 10 s).
class Hog {
 public:
  Hog(const std::function<int(int)>& connect_one, int count, int cap) {
    int ready[2], hold[2];
    if (pipe(ready) != 0 || pipe(hold) != 0) return;
    pid_ = ForkAsNobody();
    if (pid_ == 0) {
      close(ready[0]);
      close(hold[1]);
      std::vector<int> fds;
      for (int i = 0; i < count; ++i) {
        int fd = connect_one(i);
        if (fd < 0) continue;
        fds.push_back(fd);
        (void)!write(fd, "G", 1);
      }
      int opened = static_cast<int>(fds.size());
      int closed = 0;
      for (int tries = 0; tries < 200 && closed < opened - cap; ++tries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        closed = 0;
        for (int fd : fds) {
          char c;
          ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
          closed += n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
        }
      }
      (void)!write(ready[1], &opened, sizeof(opened));
      (void)!write(ready[1], &closed, sizeof(closed));
      char c;
      (void)!read(hold[0], &c, 1);
      _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    hold_ = hold[1];
    if (read(ready[0], &opened, sizeof(opened)) != static_cast<ssize_t>(sizeof(opened)) ||
        read(ready[0], &closed, sizeof(closed)) != static_cast<ssize_t>(sizeof(closed))) {
      opened = closed = -1;
    }
    close(ready[0]);
  }
  ~Hog() { LetGo(); }
  // Closes all its connections and ends.
  void LetGo() {
    if (pid_ <= 0) return;
    close(hold_);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  int opened = -1;
  int closed = -1;

 private:
  pid_t pid_ = 0;
  int hold_ = -1;
};

TEST_F(HttpServerTest, OneUsersConnectionsCannotLockOthersOut) {
  if (geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  auto server = StartUnix(At(socket_, 0666), Recorder());
  ASSERT_NE(server, nullptr);
  // nobody opens 300 idle connections and holds them; those over the cap are closed by the
  // server as soon as it accepts them.
  Hog hog([&](int) { return ConnectUnix(socket_); }, 300, 32);
  EXPECT_EQ(hog.opened, 300);
  EXPECT_EQ(hog.closed, 300 - 32) << "the connections over the cap hold no thread";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // The server has seen them all.

  // Root and another user still get in, at once.
  auto start = steady_clock::now();
  EXPECT_NE(RequestAs(socket_, 0).find("uid=0"), std::string::npos);
  EXPECT_NE(RequestAs(socket_, kNobody - 1).find("uid=65533"), std::string::npos);
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(2));
  // nobody's next connection is told why it is turned away.
  std::string refused = RequestAs(socket_, kNobody);
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("too many connections from uid 65534 at once (at most 32)"),
            std::string::npos)
      << refused;

  hog.LetGo();  // nobody gets in again.
  bool admitted = false;
  for (int i = 0; i < 100 && !admitted; ++i) {
    admitted = RequestAs(socket_, kNobody).find("uid=65534") != std::string::npos;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(admitted);
}

// One GET /whoami on a fresh connection, connecting without blocking as curl does (a full
// listen backlog is then a failed connect, not a wait). Empty when the answer is a 200, else
// what went wrong.
std::string QuickRequest(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const sockaddr_un address = UnixAddress(path);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    std::string error = "connect: " + std::string(std::strerror(errno));
    if (fd >= 0) close(fd);
    return error;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const std::string request = "GET /whoami HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\r\n";
  std::string reply;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) reply.append(buffer, n);
  }
  close(fd);
  if (reply.rfind("HTTP/1.1 200", 0) == 0) return "";
  return "reply: " + reply.substr(0, reply.find('\r'));
}

struct Latency {
  int failures = -1;
  int64_t p50_us = 0, p99_us = 0, max_us = 0;
  std::string first_failure;
};

// Latencies of `count` QuickRequests in a row, as user `uid`.
Latency MeasureAs(const std::string& path, uid_t uid, int count) {
  std::istringstream text(AsUser(uid, [&] {
    std::vector<int64_t> micros;
    int failures = 0;
    std::string first_failure;
    for (int i = 0; i < count; ++i) {
      auto start = steady_clock::now();
      std::string failure = QuickRequest(path);
      micros.push_back(
          std::chrono::duration_cast<std::chrono::microseconds>(steady_clock::now() - start)
              .count());
      failures += !failure.empty();
      if (first_failure.empty()) first_failure = failure;
    }
    std::sort(micros.begin(), micros.end());
    return std::to_string(failures) + " " + std::to_string(micros[count / 2]) + " " +
           std::to_string(micros[count * 99 / 100]) + " " + std::to_string(micros.back()) + " " +
           first_failure;
  }));
  Latency latency;
  text >> latency.failures >> latency.p50_us >> latency.p99_us >> latency.max_us;
  std::getline(text >> std::ws, latency.first_failure);
  return latency;
}

// A process of user nobody that opens `held` idle connections (32 fill its cap), then connects
// and hangs up in a tight loop, `per_second` times a second (non-blocking connects, paced in
// batches of 100) until Stop, which returns how many of its connects succeeded.
class Flood {
 public:
  Flood(const std::string& path, int held, int per_second) {
    int stop[2], count[2];
    if (pipe(stop) != 0 || pipe(count) != 0) return;
    pid_ = ForkAsNobody();
    if (pid_ == 0) {
      close(stop[1]);
      close(count[0]);
      std::vector<int> fds;
      for (int i = 0; i < held; ++i) fds.push_back(ConnectUnix(path));
      fcntl(stop[0], F_SETFL, O_NONBLOCK);
      const sockaddr_un address = UnixAddress(path);
      const auto start = steady_clock::now();
      int64_t tried = 0, made = 0;
      char c;
      while (read(stop[0], &c, 1) < 0 && errno == EAGAIN) {
        for (int i = 0; i < 100; ++i, ++tried) {
          int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
          made += connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
          close(fd);
        }
        std::this_thread::sleep_until(start + std::chrono::microseconds(tried * 1000000 /
                                                                        per_second));
      }
      (void)!write(count[1], &made, sizeof(made));
      _exit(0);
    }
    close(stop[0]);
    close(count[1]);
    stop_ = stop[1];
    count_ = count[0];
  }
  ~Flood() { Stop(); }
  int64_t Stop() {
    if (pid_ <= 0) return made_;
    close(stop_);
    if (read(count_, &made_, sizeof(made_)) != static_cast<ssize_t>(sizeof(made_))) made_ = -1;
    close(count_);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
    return made_;
  }

 private:
  pid_t pid_ = 0;
  int stop_ = -1, count_ = -1;
  int64_t made_ = 0;
};

// Issue 29: uid 65534 reconnecting in a tight loop, 15,000-20,000 times a second, made 13 of 20
// of another user's requests fail and raised their latency from 4 ms to 100-220 ms. Connections
// over its cap are now turned away before they cost a thread, by a thread that keeps up with
// the flood, so the other user's requests keep their latency: both when the flooder holds its
// 32 connections (every further one is over the cap) and when it holds none (its connections
// are admitted and hang up before they get a thread). The flood is paced at 25,000 a second,
// above the issue's: unpaced, one process with a core of its own reaches 100,000 a second and
// can outrun the accepting thread (docs/security.md, "Still open").
TEST_F(HttpServerTest, AConnectionFloodLeavesOtherUsersTheirLatency) {
  if (geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  auto server = StartUnix(At(socket_, 0666), Recorder());
  ASSERT_NE(server, nullptr);
  constexpr int kRequests = 1000;
  constexpr int kFloodPerSecond = 25000;
  for (int held : {32, 0}) {
    SCOPED_TRACE("the flooder holds " + std::to_string(held) + " connections");
    const Latency quiet = MeasureAs(socket_, kNobody - 1, kRequests);
    auto start = steady_clock::now();
    Flood flood(socket_, held, kFloodPerSecond);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // The flood is under way.
    const Latency flooded = MeasureAs(socket_, kNobody - 1, kRequests);
    const int64_t made = flood.Stop();
    const double rate = made / std::chrono::duration<double>(steady_clock::now() - start).count();
    std::printf(
        "uid 65533, %d requests: quiet p50 %.2f ms p99 %.2f ms max %.2f ms; while uid 65534 "
        "holds %d and connects %.0f times a second: p50 %.2f ms p99 %.2f ms max %.2f ms, %d "
        "failed\n",
        kRequests, quiet.p50_us / 1e3, quiet.p99_us / 1e3, quiet.max_us / 1e3, held, rate,
        flooded.p50_us / 1e3, flooded.p99_us / 1e3, flooded.max_us / 1e3, flooded.failures);
    EXPECT_EQ(quiet.failures, 0) << quiet.first_failure;
    EXPECT_EQ(flooded.failures, 0) << flooded.first_failure;
    EXPECT_GT(rate, kFloodPerSecond / 2) << "the flooder did not get the CPU it needed";
    // The goal, 20 ms, plus what the machine's own load adds without a flood.
    EXPECT_LT(flooded.p99_us, 20000 + quiet.p99_us);
  }
  // The flooding user gets in again once it lets go.
  bool admitted = false;
  for (int i = 0; i < 100 && !admitted; ++i) {
    admitted = RequestAs(socket_, kNobody).find("uid=65534") != std::string::npos;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(admitted);
}

// A client trickling its request's headers a byte every 100 ms is never idle long enough for
// the idle timeout (120 s), so it would hold its thread for as long as it likes; the header
// deadline cuts it off, also while another user floods the socket.
TEST_F(HttpServerTest, HeadersTrickledInPastTheDeadlineAreCutOff) {
  HttpLimits limits;
  limits.header_timeout_seconds = 1;
  auto server = StartUnix(At(socket_, 0666), Recorder(), limits);
  ASSERT_NE(server, nullptr);
  std::optional<Flood> flood;
  if (geteuid() == 0) flood.emplace(socket_, 32, 25000);
  const std::string request =
      "GET /slow HTTP/1.1\r\nHost: l\r\nX-Filler: " + std::string(40, 'x') + "\r\n\r\n";
  int fd = ConnectUnix(socket_);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  auto start = steady_clock::now();
  std::string reply;
  bool closed = false;
  for (size_t i = 0; i < request.size() && !closed; ++i) {
    if (send(fd, &request[i], 1, MSG_NOSIGNAL) != 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0) reply.append(buffer, n);
    closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  auto elapsed = steady_clock::now() - start;
  close(fd);
  EXPECT_TRUE(closed) << "the server waited for all " << request.size() << " bytes";
  EXPECT_GE(elapsed, std::chrono::milliseconds(900));
  EXPECT_LT(elapsed, std::chrono::milliseconds(3000));
  EXPECT_EQ(reply.rfind("HTTP/1.1 408", 0), 0u) << reply;
  EXPECT_NE(reply.find("the request's headers did not arrive within 1 s"), std::string::npos);
  EXPECT_EQ(Calls(), 0);
  // A prompt client, and two requests on one kept-alive connection, are served.
  httplib::Client client = UnixClient(socket_);
  for (int i = 0; i < 2; ++i) {
    auto result = client.Get("/prompt");
    ASSERT_TRUE(result) << i;
    EXPECT_EQ(result->status, 200);
  }
}

// A TCP connection to 127.0.0.1:`port` from `source` (any address of 127.0.0.0/8), or -1.
int ConnectTcp(uint16_t port, const char* source) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons(port);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// As user `uid`, from `source`: GET /whoami with the token; the raw reply.
std::string TcpRequestAs(uint16_t port, uid_t uid, const char* source) {
  return AsUser(uid, [&] {
    int fd = ConnectTcp(port, source);
    timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    const std::string request =
        "GET /whoami HTTP/1.1\r\nHost: l\r\nAuthorization: Bearer tok\r\nConnection: "
        "close\r\n\r\n";
    std::string reply;
    if (fd >= 0 &&
        write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) reply.append(buffer, n);
    }
    return reply;
  });
}

TEST_F(HttpServerTest, OneLocalUsersTcpConnectionsCannotLockOthersOut) {
  if (geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  HttpLimits limits;
  limits.max_connections_per_user = 4;
  StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(
      std::nullopt, TcpListen{"127.0.0.1", 0, "tok"}, Recorder(), limits);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<HttpServer> server = std::move(started).value();
  const uint16_t port = server->tcp_port();
  // nobody holds idle connections from three loopback addresses, as if it were three callers.
  const char* sources[] = {"127.0.0.1", "127.0.0.2", "127.0.0.3"};
  Hog hog([&](int i) { return ConnectTcp(port, sources[i / 4]); }, 12, 4);
  EXPECT_EQ(hog.opened, 12);
  EXPECT_EQ(hog.closed, 12 - 4) << "one user is one caller, whatever loopback address it uses";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  // Another local user, from the same address as the hog, still gets in; nobody is told why not.
  EXPECT_NE(TcpRequestAs(port, kNobody - 1, "127.0.0.1").find("HTTP/1.1 200"), std::string::npos);
  std::string refused = TcpRequestAs(port, kNobody, "127.0.0.9");
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("too many connections from uid 65534 at once (at most 4)"),
            std::string::npos)
      << refused;
}

TEST_F(HttpServerTest, SecondServerOnALiveSocketFails) {
  auto first = StartUnix(At(socket_), Recorder());
  ASSERT_NE(first, nullptr);
  StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start(At(socket_), std::nullopt, Recorder());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "another gpufracd is already serving " + socket_);
  // The first one is untouched and still serves.
  auto result = UnixClient(socket_).Get("/still-there");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
}

TEST_F(HttpServerTest, ReplacesAStaleSocket) {
  std::filesystem::create_directories(dir_ + "/run/gpufrac");
  // A socket file nobody listens on, as a killed service leaves behind.
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address;
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
  ASSERT_TRUE(std::filesystem::is_socket(socket_));

  auto server = StartUnix(At(socket_), Recorder());
  ASSERT_NE(server, nullptr);
  auto result = UnixClient(socket_).Get("/after-stale");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(Last().path, "/after-stale");
}

TEST_F(HttpServerTest, RefusesToReplaceSomethingThatIsNotASocket) {
  std::filesystem::create_directories(dir_ + "/run/gpufrac");
  std::ofstream(socket_) << "precious";
  StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(At(socket_), std::nullopt, Recorder());
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find(socket_ + " exists and is not a socket"),
            std::string::npos)
      << server.status();
  std::ifstream in(socket_);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(HttpServerTest, RejectsBadArguments) {
  EXPECT_EQ(HttpServer::Start(std::nullopt, std::nullopt, Recorder()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      HttpServer::Start(std::nullopt, TcpListen{"127.0.0.1", 0, ""}, Recorder()).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      HttpServer::Start(std::nullopt, TcpListen{"localhost:x", 0, "t"}, Recorder()).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start(At(dir_ + "/" + std::string(200, 'x')), std::nullopt, Recorder())
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_F(HttpServerTest, TcpRequiresTheBearerToken) {
  StatusOr<std::unique_ptr<HttpServer>> started =
      HttpServer::Start(std::nullopt, TcpListen{"127.0.0.1", 0, "s3cret-token"}, Recorder());
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<HttpServer> server = std::move(started).value();
  ASSERT_NE(server->tcp_port(), 0);

  httplib::Client client("127.0.0.1", server->tcp_port());
  auto none = client.Get("/v1/jobs");
  ASSERT_TRUE(none) << httplib::to_string(none.error());
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->body.find("\"error\""), std::string::npos) << none->body;
  EXPECT_EQ(none->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(none->get_header_value("WWW-Authenticate").rfind("Bearer", 0), 0u);

  for (const char* wrong : {"Bearer s3cret-tokeN", "Bearer s3cret-token-and-more", "Bearer s3cret",
                            "Basic abc", "Bearer "}) {
    auto result = client.Get("/v1/jobs", {{"Authorization", wrong}});
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 401) << wrong;
  }
  // A body sent with a wrong token is not read into a handler either.
  auto post = client.Post("/v1/jobs", {{"Authorization", "Bearer nope"}}, "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
  EXPECT_EQ(Calls(), 0);

  auto good = client.Get("/v1/jobs?x=1", {{"Authorization", "Bearer s3cret-token"}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
  EXPECT_EQ(Calls(), 1);
  HttpRequest seen = Last();
  EXPECT_TRUE(seen.caller.tcp);
  EXPECT_EQ(seen.caller.uid, geteuid());
  EXPECT_EQ(seen.caller.gid, getegid());
  EXPECT_EQ(seen.caller.pid, getpid());
  EXPECT_EQ(seen.query["x"], "1");

  // The port is taken while the server lives: a second one names the address and the reason.
  StatusOr<std::unique_ptr<HttpServer>> clash =
      HttpServer::Start(std::nullopt, TcpListen{"127.0.0.1", server->tcp_port(), "t"}, Recorder());
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("127.0.0.1:" + std::to_string(server->tcp_port())),
            std::string::npos)
      << clash.status();
  EXPECT_NE(clash.status().message().find(std::strerror(EADDRINUSE)), std::string::npos)
      << clash.status();
}

TEST_F(HttpServerTest, UnixAndTcpTogether) {
  StatusOr<std::unique_ptr<HttpServer>> started =
      HttpServer::Start(At(socket_), TcpListen{"127.0.0.1", 0, "tok"}, Recorder());
  ASSERT_TRUE(started.ok()) << started.status();
  auto unix_result = UnixClient(socket_).Get("/a");
  ASSERT_TRUE(unix_result);
  EXPECT_EQ(unix_result->status, 200);
  EXPECT_FALSE(Last().caller.tcp);
  httplib::Client tcp("127.0.0.1", (*started)->tcp_port());
  auto tcp_result = tcp.Get("/b", {{"Authorization", "Bearer tok"}});
  ASSERT_TRUE(tcp_result);
  EXPECT_EQ(tcp_result->status, 200);
  EXPECT_TRUE(Last().caller.tcp);
}

TEST_F(HttpServerTest, BodyOverTheLimitIsRefusedBeforeTheHandler) {
  HttpLimits limits;
  limits.max_body_bytes = 1024;
  auto server = StartUnix(At(socket_), Recorder(), limits);
  ASSERT_NE(server, nullptr);

  auto big = UnixClient(socket_).Post("/v1/jobs", std::string(4096, 'x'), "application/json");
  // Larger than the socket's buffers: the server reads and drops it before answering, so the
  // client's write does not fail and it gets to read the 413.
  auto huge = UnixClient(socket_).Post("/v1/jobs", std::string(8 << 20, 'x'), "application/json");
  ASSERT_TRUE(huge) << httplib::to_string(huge.error());
  EXPECT_EQ(huge->status, 413);
  // A client that waits for "100 Continue" is answered at once, without sending its body.
  std::string reply = RawExchange(socket_,
                                  "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n"
                                  "Expect: 100-continue\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  ASSERT_TRUE(big) << httplib::to_string(big.error());
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(big->body.find("\"error\""), std::string::npos) << big->body;
  EXPECT_EQ(Calls(), 0);

  // Without a Content-Length (chunked), the bytes themselves are counted.
  auto chunked = UnixClient(socket_).Post(
      "/v1/jobs",
      [](size_t offset, httplib::DataSink& sink) {
        if (offset < 4096) {
          std::string piece(512, 'y');
          sink.write(piece.data(), piece.size());
        } else {
          sink.done();
        }
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked) << httplib::to_string(chunked.error());
  EXPECT_EQ(chunked->status, 413);
  EXPECT_EQ(Calls(), 0);

  auto exact = UnixClient(socket_).Post("/v1/jobs", std::string(1024, 'z'), "application/json");
  ASSERT_TRUE(exact);
  EXPECT_EQ(exact->status, 200);
  EXPECT_EQ(Calls(), 1);
  EXPECT_EQ(Last().body.size(), 1024u);
}

TEST_F(HttpServerTest, BodyOverTheLimitOnTcp) {
  HttpLimits limits;
  limits.max_body_bytes = 1024;
  StatusOr<std::unique_ptr<HttpServer>> started =
      HttpServer::Start(std::nullopt, TcpListen{"127.0.0.1", 0, "tok"}, Recorder(), limits);
  ASSERT_TRUE(started.ok()) << started.status();
  httplib::Client client("127.0.0.1", (*started)->tcp_port());
  for (int i = 0; i < 10; ++i) {
    auto big = client.Post("/v1/jobs", {{"Authorization", "Bearer tok"}}, std::string(100000, 'x'),
                           "application/json");
    ASSERT_TRUE(big) << i << " " << httplib::to_string(big.error());
    EXPECT_EQ(big->status, 413);
  }
  EXPECT_EQ(Calls(), 0);
}

TEST_F(HttpServerTest, SlowHandlerDoesNotBlockOtherRequests) {
  auto server = StartUnix(At(socket_), [](const HttpRequest& request) {
    if (request.path == "/slow") std::this_thread::sleep_for(std::chrono::seconds(1));
    HttpResponse response;
    response.body = request.path;
    return response;
  });
  ASSERT_NE(server, nullptr);
  std::atomic<bool> slow_done{false};
  std::thread slow([&] {
    auto result = UnixClient(socket_).Get("/slow");
    EXPECT_TRUE(result && result->status == 200 && result->body == "/slow");
    slow_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto start = steady_clock::now();
  auto fast = UnixClient(socket_).Get("/fast");
  auto elapsed = steady_clock::now() - start;
  ASSERT_TRUE(fast);
  EXPECT_EQ(fast->body, "/fast");
  EXPECT_FALSE(slow_done.load());
  EXPECT_LT(elapsed, std::chrono::milliseconds(500));
  slow.join();
  EXPECT_TRUE(slow_done.load());
}

TEST_F(HttpServerTest, ConnectionLimitTurnsAwayExtraConnections) {
  HttpLimits limits;
  limits.max_connections = 1;
  std::atomic<bool> in_handler{false};
  auto server = StartUnix(
      At(socket_),
      [&](const HttpRequest& request) {
        if (request.path == "/slow") {
          in_handler = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
        return HttpResponse{};
      },
      limits);
  ASSERT_NE(server, nullptr);
  std::thread slow([&] {
    auto result = UnixClient(socket_).Get("/slow");
    EXPECT_TRUE(result && result->status == 200);
  });
  for (int i = 0; i < 1000 && !in_handler; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto extra = UnixClient(socket_).Get("/extra");
  EXPECT_FALSE(extra && extra->status == 200);
  slow.join();
  // The slot is free again once the first connection is gone.
  for (int i = 0; i < 100; ++i) {
    auto again = UnixClient(socket_).Get("/again");
    if (again && again->status == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "the server did not accept a connection after the first one closed";
}

TEST_F(HttpServerTest, IdleConnectionsTimeOut) {
  HttpLimits limits;
  limits.connection_timeout_seconds = 1;
  auto server = StartUnix(At(socket_), Recorder(), limits);
  ASSERT_NE(server, nullptr);
  auto start = steady_clock::now();
  std::string reply = RawExchange(socket_, "");  // Connects and says nothing.
  auto elapsed = steady_clock::now() - start;
  EXPECT_EQ(reply.rfind("HTTP/1.1 408", 0), 0u) << reply;  // Told why, as it sent nothing.
  EXPECT_GE(elapsed, std::chrono::milliseconds(500));
  EXPECT_LT(elapsed, std::chrono::milliseconds(4000));  // Well before the client's own 5 s.
}

TEST_F(HttpServerTest, ThrowingHandlerGets500AndTheServerGoesOn) {
  auto server = StartUnix(At(socket_), [](const HttpRequest& request) -> HttpResponse {
    if (request.path == "/throw") throw std::runtime_error("boom \"quoted\"");
    if (request.path == "/throw-int") throw 42;
    return HttpResponse{};
  });
  ASSERT_NE(server, nullptr);
  httplib::Client client = UnixClient(socket_);
  for (const char* path : {"/throw", "/throw-int"}) {
    auto result = client.Get(path);
    ASSERT_TRUE(result) << path;
    EXPECT_EQ(result->status, 500);
    EXPECT_EQ(result->body, "{\"error\": \"internal error\"}");
    EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  }
  auto fine = client.Get("/fine");
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200);
}

TEST_F(HttpServerTest, GarbageDoesNotStopTheServer) {
  auto server = StartUnix(At(socket_), Recorder());
  ASSERT_NE(server, nullptr);
  std::string reply = RawExchange(socket_, "GARBAGE\r\n\r\n");
  // Whatever the answer, it is not from our handler.
  EXPECT_EQ(reply.find("uid="), std::string::npos) << reply;
  // Binary junk, then end of input (else the server waits for the rest of the request).
  RawExchange(socket_, std::string("\x00\xff\x01\r\n\r\n\r\n", 9), /*half_close=*/true);
  reply = RawExchange(socket_, "GET / HTTP/9.9\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 505", 0), 0u) << reply;
  // A raw, well-formed request still works on a plain socket.
  std::string ok =
      RawExchange(socket_, "GET /raw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  auto result = UnixClient(socket_).Get("/after-garbage");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(Last().path, "/after-garbage");
  EXPECT_EQ(Calls(), 2);
}

TEST_F(HttpServerTest, DestroyingTheServerRemovesTheSocket) {
  auto server = StartUnix(At(socket_), Recorder());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(std::filesystem::exists(socket_));
  server.reset();
  EXPECT_FALSE(std::filesystem::exists(socket_));
  EXPECT_EQ(ConnectUnix(socket_), -1);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(HttpServerTest, DestroyingLeavesAReplacedSocketFileAlone) {
  auto server = StartUnix(At(socket_), Recorder());
  ASSERT_NE(server, nullptr);
  // Someone else took the path over (our file was removed and another put there).
  ASSERT_EQ(unlink(socket_.c_str()), 0);
  std::ofstream(socket_) << "theirs";
  server.reset();
  EXPECT_TRUE(std::filesystem::exists(socket_));
}

TEST_F(HttpServerTest, NoHandlerRunsAfterTheDestructorReturns) {
  std::atomic<int> running{0};
  std::atomic<bool> destroyed{false};
  std::atomic<bool> ran_after{false};
  auto server = StartUnix(At(socket_), [&](const HttpRequest&) {
    ++running;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (destroyed) ran_after = true;
    --running;
    return HttpResponse{};
  });
  ASSERT_NE(server, nullptr);
  std::thread client([&] { UnixClient(socket_).Get("/long"); });
  for (int i = 0; i < 1000 && running == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(running, 1);
  server.reset();
  destroyed = true;
  EXPECT_EQ(running, 0);
  client.join();
  EXPECT_FALSE(ran_after);
}

}  // namespace
}  // namespace gpufrac::node
