// ApiClient on cpp-httplib's SSLClient (one connection per call) with OpenSSL for the trust
// store and client certificates, and nlohmann::json for every body.
#include "k8s/api_client.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/text.h"

namespace gpufrac::k8s {
namespace {

// Watch lines and error bodies larger than this are not from a sane API server.
constexpr size_t kMaxLine = 64 << 20;

// The standard phrase, for answers that carry no Status object of their own.
std::string ReasonOf(int code) {
  static const std::map<int, std::string> kReasons = {{400, "Bad Request"},
                                                      {401, "Unauthorized"},
                                                      {403, "Forbidden"},
                                                      {404, "Not Found"},
                                                      {405, "Method Not Allowed"},
                                                      {409, "Conflict"},
                                                      {410, "Gone"},
                                                      {415, "Unsupported Media Type"},
                                                      {422, "Unprocessable Entity"},
                                                      {429, "Too Many Requests"},
                                                      {500, "Internal Server Error"},
                                                      {503, "Service Unavailable"}};
  auto it = kReasons.find(code);
  return it == kReasons.end() ? "" : it->second;
}

// Maps an HTTP status and the server's Status object (reason, message) to our Status.
Status HttpError(const std::string& verb, const std::string& path, int code, const json& status) {
  std::string reason;
  std::string message;
  if (status.is_object()) {
    if (status.contains("reason") && status["reason"].is_string()) reason = status["reason"];
    if (status.contains("message") && status["message"].is_string()) message = status["message"];
  }
  std::string text = verb + " " + path + ": HTTP " + std::to_string(code) + " " +
                     (reason.empty() ? ReasonOf(code) : reason);
  if (!message.empty()) text += ": " + message;
  StatusCode out = StatusCode::kInternal;
  if (code == 401 || code == 403) {
    out = StatusCode::kPermissionDenied;
  } else if (code == 404) {
    out = StatusCode::kNotFound;
  } else if (code == 409) {
    out = reason == "AlreadyExists" ? StatusCode::kFailedPrecondition : StatusCode::kAborted;
  } else if (code == 410) {
    out = StatusCode::kAborted;
  } else if (code == 400 || code == 405 || code == 413 || code == 415 || code == 422) {
    out = StatusCode::kInvalidArgument;
  } else if (code == 429 || code >= 500) {
    out = StatusCode::kUnavailable;
  }
  return Status(out, text);
}

json ParseOrNull(const std::string& body) {
  return json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
}

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no details";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// "https://host[:port][/prefix]" into its parts; IPv6 hosts lose their brackets.
Status ParseServer(const std::string& server, std::string* host, int* port, std::string* base) {
  const std::string scheme = "https://";
  if (server.rfind(scheme, 0) != 0) {
    return InvalidArgumentError("server \"" + server + "\" is not an https:// URL");
  }
  std::string rest = server.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  *base = slash == std::string::npos ? "" : rest.substr(slash);
  while (!base->empty() && base->back() == '/') base->pop_back();
  std::string port_text;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) {
      return InvalidArgumentError("server \"" + server + "\": unclosed '[' in the host");
    }
    *host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') {
        return InvalidArgumentError("server \"" + server + "\": junk after the IPv6 host");
      }
      port_text = authority.substr(close + 2);
    }
  } else {
    size_t colon = authority.find(':');
    *host = authority.substr(0, colon);
    if (colon != std::string::npos) port_text = authority.substr(colon + 1);
  }
  if (host->empty()) return InvalidArgumentError("server \"" + server + "\" names no host");
  *port = 443;
  if (!port_text.empty()) {
    char* end = nullptr;
    long value = std::strtol(port_text.c_str(), &end, 10);
    if (*end != '\0' || value <= 0 || value > 65535) {
      return InvalidArgumentError("server \"" + server + "\": bad port \"" + port_text + "\"");
    }
    *port = static_cast<int>(value);
  }
  return OkStatus();
}

void Sleep(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

}  // namespace

// Parsed once, shared by every call's SSLClient (OpenSSL reference-counts them).
struct ApiClient::Tls {
  std::vector<X509*> ca_certs;
  X509* client_cert = nullptr;
  EVP_PKEY* client_key = nullptr;

  ~Tls() {
    for (X509* cert : ca_certs) X509_free(cert);
    X509_free(client_cert);
    EVP_PKEY_free(client_key);
  }

  // A connection of its own for one call.
  std::shared_ptr<httplib::SSLClient> NewClient(const ApiClient& api,
                                                std::chrono::milliseconds read_timeout) const {
    std::shared_ptr<httplib::SSLClient> client =
        client_cert != nullptr
            ? std::make_shared<httplib::SSLClient>(api.host_, api.port_, client_cert, client_key)
            : std::make_shared<httplib::SSLClient>(api.host_, api.port_);
    if (!client->is_valid()) return nullptr;
    client->set_keep_alive(false);
    client->set_connection_timeout(api.config_.timeout);
    client->set_write_timeout(api.config_.timeout);
    client->set_read_timeout(read_timeout);
    client->set_url_encode(false);  // Paths and queries are encoded by us, once.
    if (api.config_.insecure_skip_tls_verify) {
      client->enable_server_certificate_verification(false);
    } else {
      client->enable_server_certificate_verification(true);
      if (!ca_certs.empty()) {
        X509_STORE* store = SSL_CTX_get_cert_store(client->ssl_context());
        for (X509* cert : ca_certs) X509_STORE_add_cert(store, cert);
        // Left alone, httplib adds the system trust store on first connect; a configured CA
        // must be the only one trusted (as in client-go), so point that at a directory that
        // holds no certificates.
        client->set_ca_cert_path("", "/nonexistent/gpufrac-trust-only-configured-ca");
      }
    }
    return client;
  }
};

void WatchStopper::Stop() {
  std::function<void()> on_stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    on_stop = on_stop_;
  }
  // Outside the lock: httplib's stop() takes the connection's mutex, which a connecting Watch
  // holds while it asks stopped().
  if (on_stop) on_stop();
}

bool WatchStopper::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

bool WatchStopper::Arm(std::function<void()> on_stop) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;
  on_stop_ = std::move(on_stop);
  return true;
}

void WatchStopper::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  on_stop_ = nullptr;
}

StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(ClientConfig config) {
  std::string host;
  int port = 0;
  std::string base;
  GPUFRAC_RETURN_IF_ERROR(ParseServer(config.server, &host, &port, &base));
  auto tls = std::make_unique<Tls>();
  if (!config.ca_pem.empty()) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(config.ca_pem.data(), static_cast<int>(config.ca_pem.size())), &BIO_free);
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      tls->ca_certs.push_back(cert);
    }
    ERR_clear_error();  // The loop ends with a "no start line" error.
    if (tls->ca_certs.empty()) {
      return InvalidArgumentError(
          "the CA (certificate-authority / ca.crt) holds no PEM certificate");
    }
  }
  if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
    return InvalidArgumentError("a client certificate needs both the certificate and the key");
  }
  if (!config.client_cert_pem.empty()) {
    std::unique_ptr<BIO, decltype(&BIO_free)> cert_bio(
        BIO_new_mem_buf(config.client_cert_pem.data(),
                        static_cast<int>(config.client_cert_pem.size())),
        &BIO_free);
    tls->client_cert = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr);
    if (tls->client_cert == nullptr) {
      return InvalidArgumentError("the client certificate is not PEM: " + OpenSslError());
    }
    std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
        BIO_new_mem_buf(config.client_key_pem.data(),
                        static_cast<int>(config.client_key_pem.size())),
        &BIO_free);
    tls->client_key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
    if (tls->client_key == nullptr) {
      return InvalidArgumentError("the client key is not a PEM private key: " + OpenSslError());
    }
    if (X509_check_private_key(tls->client_cert, tls->client_key) != 1) {
      ERR_clear_error();
      return InvalidArgumentError("the client key does not match the client certificate");
    }
  }
  if (config.token_file.empty() && config.token.find_first_of("\r\n") != std::string::npos) {
    return InvalidArgumentError("the token contains a line break");
  }
  return std::unique_ptr<ApiClient>(
      new ApiClient(std::move(config), std::move(host), port, std::move(base), std::move(tls)));
}

ApiClient::ApiClient(ClientConfig config, std::string host, int port, std::string base_path,
                     std::unique_ptr<Tls> tls)
    : config_(std::move(config)),
      host_(std::move(host)),
      port_(port),
      base_path_(std::move(base_path)),
      tls_(std::move(tls)) {}

ApiClient::~ApiClient() = default;

std::string ApiClient::Token() {
  if (config_.token_file.empty()) return config_.token;
  std::lock_guard<std::mutex> lock(token_mu_);
  struct stat st {};
  if (stat(config_.token_file.c_str(), &st) != 0) {
    // Mid-rotation the file can vanish for a moment; the last token is still the best guess.
    return token_;
  }
  std::string stamp = std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
                      std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  if (stamp != token_file_stamp_) {
    std::ifstream in(config_.token_file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (in) {
      token_ = Trim(text.str());
      token_file_stamp_ = stamp;
    } else {
      LogWarning("cannot read the token file %s; keeping the previous token",
                 config_.token_file.c_str());
    }
  }
  return token_;
}

namespace {

// What went wrong below HTTP, in words a user can act on.
Status TransportError(const std::string& verb, const std::string& path, httplib::Error error,
                      const httplib::SSLClient& client, const std::string& server) {
  std::string text = verb + " " + path + ": ";
  if (error == httplib::Error::SSLServerVerification) {
    long result = client.get_openssl_verify_result();
    text += "TLS verification of " + server + " failed: ";
    text += result != X509_V_OK
                ? std::string(X509_verify_cert_error_string(result)) +
                      " (is the right CA configured: certificate-authority / ca.crt?)"
                : "the server certificate does not name this host";
  } else if (error == httplib::Error::SSLConnection) {
    text += "TLS handshake with " + server +
            " failed (wrong port, or a client certificate "
            "is required or refused)";
  } else if (error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout) {
    text += "cannot connect to " + server + " (" + httplib::to_string(error) +
            "; is the address right and the API server up?)";
  } else if (error == httplib::Error::Read) {
    text += "the connection to " + server + " dropped (or timed out) while reading the answer";
  } else if (error == httplib::Error::Write) {
    text += "the connection to " + server + " dropped while sending the request";
  } else {
    text += "talking to " + server + " failed: " + httplib::to_string(error);
  }
  return UnavailableError(text);
}

}  // namespace

StatusOr<json> ApiClient::Call(const std::string& verb, const std::string& path,
                               const std::string& body, const std::string& content_type) {
  std::shared_ptr<httplib::SSLClient> client = tls_->NewClient(*this, config_.timeout);
  if (!client) return InternalError(verb + " " + path + ": cannot set up TLS: " + OpenSslError());
  const std::string token = Token();
  if (!token.empty()) client->set_bearer_token_auth(token);
  httplib::Headers headers = {{"Accept", "application/json"}, {"User-Agent", "gpufrac"}};
  const std::string url = base_path_ + path;
  if (verb != "GET" && verb != "POST" && verb != "PATCH" && verb != "DELETE") {
    return InternalError("unsupported verb " + verb);
  }
  httplib::Result res = [&] {
    if (verb == "GET") return client->Get(url, headers);
    if (verb == "POST") return client->Post(url, headers, body, content_type);
    if (verb == "PATCH") return client->Patch(url, headers, body, content_type);
    return body.empty() ? client->Delete(url, headers)
                        : client->Delete(url, headers, body, content_type);
  }();
  if (!res) return TransportError(verb, path, res.error(), *client, config_.server);
  json answer = ParseOrNull(res->body);
  if (res->status < 200 || res->status >= 300) {
    return HttpError(verb, path, res->status, answer);
  }
  if (answer.is_discarded()) {
    return InternalError(verb + " " + path + ": the server's answer is not JSON");
  }
  return answer;
}

StatusOr<json> ApiClient::Get(const std::string& path) { return Call("GET", path, "", ""); }

StatusOr<json> ApiClient::List(const std::string& path, const ListOptions& options) {
  bool paged = options.page_size > 0;
  json result;
  json items = json::array();
  std::string next;
  while (true) {
    httplib::Params params;
    if (!options.label_selector.empty()) params.emplace("labelSelector", options.label_selector);
    if (!options.field_selector.empty()) params.emplace("fieldSelector", options.field_selector);
    // The API server refuses resourceVersion together with continue.
    if (next.empty() && !options.resource_version.empty()) {
      params.emplace("resourceVersion", options.resource_version);
    }
    if (paged) params.emplace("limit", std::to_string(options.page_size));
    if (!next.empty()) params.emplace("continue", next);
    StatusOr<json> page = Call("GET", httplib::append_query_params(path, params), "", "");
    if (!page.ok()) {
      if (page.status().code() == StatusCode::kAborted && !next.empty()) {
        // The continue token expired (410): the pages read so far are from a snapshot we can
        // no longer finish, so read everything again in one go.
        LogInfo("list of %s: continue token expired, listing again unpaged", path.c_str());
        paged = false;
        next.clear();
        items = json::array();
        continue;
      }
      return page.status();
    }
    if (!page->is_object()) return InternalError("GET " + path + ": the answer is not an object");
    if (page->contains("items") && (*page)["items"].is_array()) {
      for (json& item : (*page)["items"]) items.push_back(std::move(item));
    }
    if (next.empty()) result = std::move(*page);
    const json& meta = next.empty() ? result["metadata"] : (*page)["metadata"];
    next = meta.is_object() && meta.contains("continue") && meta["continue"].is_string()
               ? meta["continue"].get<std::string>()
               : "";
    if (next.empty()) break;
  }
  result["items"] = std::move(items);
  if (result["metadata"].is_object()) {
    result["metadata"].erase("continue");
    result["metadata"].erase("remainingItemCount");
  }
  return result;
}

StatusOr<json> ApiClient::Create(const std::string& path, const json& object) {
  return Call("POST", path, object.dump(), "application/json");
}

StatusOr<json> ApiClient::Patch(const std::string& path, const json& patch, PatchType type) {
  const char* content_type = "application/merge-patch+json";
  if (type == PatchType::kStrategicMerge) content_type = "application/strategic-merge-patch+json";
  if (type == PatchType::kJson) content_type = "application/json-patch+json";
  return Call("PATCH", path, patch.dump(), content_type);
}

StatusOr<json> ApiClient::Delete(const std::string& path, const json& delete_options) {
  return Call("DELETE", path, delete_options.is_null() ? "" : delete_options.dump(),
              "application/json");
}

namespace {

// The watch request's path: the resource with its watch parameters.
std::string WatchQuery(const std::string& path, const ListOptions& options,
                       const std::string& resource_version) {
  httplib::Params params;
  params.emplace("watch", "1");
  if (!resource_version.empty()) params.emplace("resourceVersion", resource_version);
  params.emplace("allowWatchBookmarks", "true");
  params.emplace("timeoutSeconds", std::to_string(options.watch_timeout.count()));
  if (!options.label_selector.empty()) params.emplace("labelSelector", options.label_selector);
  if (!options.field_selector.empty()) params.emplace("fieldSelector", options.field_selector);
  return httplib::append_query_params(path, params);
}

// Reads a watch's response body: newline-separated events, each handed to the callback, until
// one is an ERROR, is not JSON, or the callback says stop.
class WatchStream {
 public:
  WatchStream(const std::string& query_path, const WatchCallback& callback)
      : query_path_(query_path), callback_(callback) {}

  void OnResponse(int status) { http_status_ = status; }
  // A piece of the body; false to stop reading.
  bool Feed(const char* data, size_t size) {
    if (http_status_ != 200) {
      error_body_.append(data, size);
      return error_body_.size() < kMaxLine;
    }
    buffer_.append(data, size);
    size_t start = 0;
    for (size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (!HandleLine(std::string_view(buffer_).substr(start, nl - start))) return false;
    }
    buffer_.erase(0, start);
    return buffer_.size() < kMaxLine;
  }
  // The stream ended cleanly: a last event without its newline still counts.
  void FinishCleanly() {
    if (http_status_ == 200 && event_error_.ok() && !callback_stopped_ && !buffer_.empty()) {
      HandleLine(buffer_);
    }
  }

  int http_status() const { return http_status_; }
  const std::string& error_body() const { return error_body_; }
  bool callback_stopped() const { return callback_stopped_; }
  bool gone() const { return gone_; }
  const Status& event_error() const { return event_error_; }
  int events() const { return events_; }

 private:
  bool HandleLine(std::string_view line) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) return true;
    json event = json::parse(line.begin(), line.end(), nullptr, false);
    if (event.is_discarded() || !event.is_object() || !event.contains("type") ||
        !event["type"].is_string()) {
      event_error_ = InternalError("GET " + query_path_ + ": a watch event is not JSON");
      return false;
    }
    const std::string type = event["type"];
    const json& object = event.contains("object") ? event["object"] : json();
    if (type == "ERROR") {
      int code = object.is_object() && object.contains("code") && object["code"].is_number()
                     ? object["code"].get<int>()
                     : 500;
      gone_ = code == 410;
      event_error_ = HttpError("GET", query_path_, code, object);
      return false;
    }
    ++events_;
    if (!callback_(type, object)) {
      callback_stopped_ = true;
      return false;
    }
    return true;
  }

  const std::string& query_path_;
  const WatchCallback& callback_;
  int http_status_ = 0;
  std::string error_body_;
  std::string buffer_;
  bool callback_stopped_ = false;
  bool gone_ = false;
  Status event_error_;
  int events_ = 0;
};

}  // namespace

WatchResult ApiClient::Watch(const std::string& path, const ListOptions& options,
                             const std::string& resource_version, const WatchCallback& callback,
                             WatchStopper* stopper) {
  WatchResult result;
  if (stopper != nullptr && stopper->stopped()) {
    result.end = WatchEnd::kStopped;
    return result;
  }
  const std::string query_path = WatchQuery(path, options, resource_version);
  // Quiet watches are normal: only give up reading well after the server should have ended it.
  auto read_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.watch_timeout) +
                      config_.timeout + std::chrono::seconds(30);
  std::shared_ptr<httplib::SSLClient> client = tls_->NewClient(*this, read_timeout);
  if (!client) {
    result.end = WatchEnd::kError;
    result.status = InternalError("GET " + query_path + ": cannot set up TLS: " + OpenSslError());
    return result;
  }
  const std::string token = Token();
  if (!token.empty()) client->set_bearer_token_auth(token);
  if (stopper != nullptr) {
    // A Stop() that comes before the socket exists finds no request to cancel, so the socket
    // itself checks on creation (under the lock stop() takes) and is shut down at once.
    client->set_socket_options([stopper](socket_t sock) {
      httplib::default_socket_options(sock);
      if (stopper->stopped()) ::shutdown(sock, SHUT_RDWR);
    });
    if (!stopper->Arm([client] { client->stop(); })) {
      result.end = WatchEnd::kStopped;
      return result;
    }
  }

  WatchStream stream(query_path, callback);
  httplib::Headers headers = {{"Accept", "application/json"}, {"User-Agent", "gpufrac"}};
  httplib::Result res = client->Get(
      base_path_ + query_path, headers,
      [&](const httplib::Response& response) {
        stream.OnResponse(response.status);
        return true;
      },
      [&](const char* data, size_t size) { return stream.Feed(data, size); });
  if (stopper != nullptr) stopper->Disarm();
  if (res) stream.FinishCleanly();
  result.events = stream.events();

  // How it ended, the watch's own error first.
  const int http_status = stream.http_status();
  if (stream.gone()) {
    result.end = WatchEnd::kGone;
    result.status = stream.event_error();
  } else if (!stream.event_error().ok()) {
    result.end = WatchEnd::kError;
    result.status = stream.event_error();
  } else if (stream.callback_stopped() || (stopper != nullptr && stopper->stopped())) {
    result.end = WatchEnd::kStopped;
  } else if (!res) {
    result.end = WatchEnd::kError;
    result.status = TransportError("GET", query_path, res.error(), *client, config_.server);
  } else if (http_status == 410) {
    result.end = WatchEnd::kGone;
    result.status = HttpError("GET", query_path, http_status, ParseOrNull(stream.error_body()));
  } else if (http_status != 200) {
    result.end = WatchEnd::kError;
    result.status = HttpError("GET", query_path, http_status, ParseOrNull(stream.error_body()));
  } else {
    result.end = WatchEnd::kClosed;
  }
  return result;
}

StatusOr<json> PatchWithRetry(ApiClient& client, const std::string& path,
                              const std::function<StatusOr<json>(const json& current)>& make_patch,
                              int attempts) {
  Status last;
  for (int attempt = 0; attempt < std::max(attempts, 1); ++attempt) {
    if (attempt > 0) {
      // Someone else is writing the same object: give them a moment, growing, capped.
      Sleep(std::chrono::milliseconds(std::min(10 << attempt, 500)));
    }
    GPUFRAC_ASSIGN_OR_RETURN(json current, client.Get(path));
    GPUFRAC_ASSIGN_OR_RETURN(json patch, make_patch(current));
    if (patch.is_null() || (patch.is_object() && patch.empty())) return current;
    if (!patch.is_object()) {
      return InvalidArgumentError("PATCH " + path +
                                  ": make_patch must return a merge patch "
                                  "(a JSON object)");
    }
    const json& meta = current["metadata"];
    if (!meta.is_object() || !meta.contains("resourceVersion")) {
      return InternalError("GET " + path + ": the object has no metadata.resourceVersion");
    }
    patch["metadata"]["resourceVersion"] = meta["resourceVersion"];
    StatusOr<json> patched = client.Patch(path, patch, PatchType::kMerge);
    if (patched.ok() || patched.status().code() != StatusCode::kAborted) return patched;
    last = patched.status();
  }
  return AbortedError("PATCH " + path + ": gave up after " + std::to_string(std::max(attempts, 1)) +
                      " conflicting attempts; last: " + last.message());
}

}  // namespace gpufrac::k8s
