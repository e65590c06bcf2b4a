// FakeApiServer: cpp-httplib's SSLServer with certificates minted through the OpenSSL API, and
// a small in-memory object store whose every change is an event in one ordered log (the
// resourceVersion is the log position), which is what list, watch and compaction read from.
#include "k8s/fake_apiserver.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "common/text.h"

namespace gpufrac::k8s::testing {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- certificates

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertFree {
  void operator()(X509* cert) const { X509_free(cert); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;
using CertPtr = std::unique_ptr<X509, CertFree>;

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key`, signed by issuer/issuer_key (self-signed when issuer is null).
CertPtr MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                 const std::vector<std::pair<int, const char*>>& extensions) {
  static std::atomic<long> serial{1};
  CertPtr cert(X509_new());
  if (!cert) return nullptr;
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  for (const auto& [nid, value] : extensions) {
    if (!AddExtension(cert.get(), issuer ? issuer : cert.get(), nid, value)) return nullptr;
  }
  if (X509_sign(cert.get(), issuer_key ? issuer_key : key, EVP_sha256()) == 0) return nullptr;
  return cert;
}

std::string CertPem(X509* cert) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

std::string KeyPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

// ---------------------------------------------------------------- API conventions

struct ResourceInfo {
  const char* resource;
  const char* kind;
  bool namespaced;
  std::vector<std::string> fields;  // Supported field selectors besides metadata.name/namespace.
};

const std::vector<ResourceInfo>& Resources() {
  static const std::vector<ResourceInfo> kResources = {
      {"pods", "Pod", true, {"spec.nodeName", "status.phase", "spec.schedulerName"}},
      {"nodes", "Node", false, {"spec.unschedulable"}},
      {"namespaces", "Namespace", false, {"status.phase"}},
      {"events",
       "Event",
       true,
       {"involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
        "involvedObject.uid", "reason", "type"}},
  };
  return kResources;
}

const ResourceInfo* ByResource(const std::string& resource) {
  for (const ResourceInfo& info : Resources()) {
    if (resource == info.resource) return &info;
  }
  return nullptr;
}

const ResourceInfo* ByKind(const std::string& kind) {
  for (const ResourceInfo& info : Resources()) {
    if (kind == info.kind) return &info;
  }
  return nullptr;
}

std::string ReasonFor(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    default:
      return "Unknown";
  }
}

json StatusObject(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void Fail(httplib::Response& res, int code, const std::string& message,
          const std::string& reason = "") {
  Reply(res, code, StatusObject(code, reason.empty() ? ReasonFor(code) : reason, message));
}

std::string Str(const json& object, const char* a, const char* b) {
  if (!object.is_object() || !object.contains(a) || !object[a].is_object()) return "";
  const json& inner = object[a];
  if (!inner.contains(b) || !inner[b].is_string()) return "";
  return inner[b];
}

std::string Trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") + 1 - begin);
}

// ---------------------------------------------------------------- selectors

struct Requirement {
  enum Op { kEq, kNe, kExists, kNotExists } op;
  std::string key;
  std::string value;
};

// Equality-based selectors ("a=b,c!=d", plus "k" and "!k" for labels). Set-based ones ("in",
// "notin") are refused rather than misread.
bool ParseSelector(const std::string& text, bool labels, std::vector<Requirement>* out,
                   std::string* error) {
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t comma = text.find(',', start);
    std::string term = Trim(text.substr(start, comma - start));
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (term.empty()) continue;
    if (term.find('(') != std::string::npos || term.find(' ') != std::string::npos) {
      *error = "set-based selector \"" + term + "\" is not supported by the fake";
      return false;
    }
    Requirement r;
    size_t at;
    if ((at = term.find("!=")) != std::string::npos) {
      r = {Requirement::kNe, term.substr(0, at), term.substr(at + 2)};
    } else if ((at = term.find("==")) != std::string::npos) {
      r = {Requirement::kEq, term.substr(0, at), term.substr(at + 2)};
    } else if ((at = term.find('=')) != std::string::npos) {
      r = {Requirement::kEq, term.substr(0, at), term.substr(at + 1)};
    } else if (labels && term[0] == '!') {
      r = {Requirement::kNotExists, term.substr(1), ""};
    } else if (labels) {
      r = {Requirement::kExists, term, ""};
    } else {
      *error = "invalid field selector term \"" + term + "\"";
      return false;
    }
    if (r.key.empty()) {
      *error = "selector term \"" + term + "\" names no key";
      return false;
    }
    out->push_back(r);
  }
  return true;
}

struct Selector {
  std::vector<Requirement> labels;
  std::vector<Requirement> fields;

  bool Matches(const json& object) const {
    for (const Requirement& r : labels) {
      const json* value = nullptr;
      if (object.contains("metadata") && object["metadata"].contains("labels") &&
          object["metadata"]["labels"].contains(r.key)) {
        value = &object["metadata"]["labels"][r.key];
      }
      std::string text = value && value->is_string() ? value->get<std::string>() : "";
      bool ok = r.op == Requirement::kEq       ? value && text == r.value
                : r.op == Requirement::kNe     ? !value || text != r.value
                : r.op == Requirement::kExists ? value != nullptr
                                               : value == nullptr;
      if (!ok) return false;
    }
    for (const Requirement& r : fields) {
      bool equal = FieldValue(object, r.key) == r.value;
      if (equal != (r.op == Requirement::kEq)) return false;
    }
    return true;
  }

  // A dotted field as the API server's field selectors see it: missing is "".
  static std::string FieldValue(const json& object, const std::string& field) {
    const json* at = &object;
    size_t start = 0;
    while (start <= field.size()) {
      size_t dot = field.find('.', start);
      std::string part = field.substr(start, dot - start);
      if (!at->is_object() || !at->contains(part)) return "";
      at = &(*at)[part];
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (at->is_string()) return at->get<std::string>();
    if (at->is_boolean()) return at->get<bool>() ? "true" : "false";
    if (at->is_number()) return at->dump();
    return "";
  }
};

// ---------------------------------------------------------------- routing

// What an API path names.
struct Route {
  const ResourceInfo* info = nullptr;
  std::string ns;           // "" for cluster-scoped resources or all namespaces.
  std::string name;         // "" for a collection.
  std::string subresource;  // "status", "binding" or "".
};

bool ParseRoute(const std::string& path, Route* route) {
  std::vector<std::string> parts;
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    parts.push_back(path.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (!parts.empty() && parts.back().empty()) parts.pop_back();
  if (parts.size() < 3 || parts[0] != "api" || parts[1] != "v1") return false;
  size_t i = 2;
  // /api/v1/namespaces and /api/v1/namespaces/<name> name Namespace objects; deeper paths name
  // objects in that namespace.
  if (parts[i] == "namespaces" && parts.size() > 4) {
    route->ns = parts[3];
    i = 4;
  }
  route->info = ByResource(parts[i]);
  if (route->info == nullptr) return false;
  if (route->info->namespaced == false && !route->ns.empty()) return false;
  if (parts.size() > i + 1) route->name = parts[i + 1];
  if (parts.size() > i + 2) route->subresource = parts[i + 2];
  if (parts.size() > i + 3) return false;
  if (!route->subresource.empty() && route->subresource != "status" &&
      !(route->subresource == "binding" && std::string(route->info->resource) == "pods")) {
    return false;
  }
  if (route->subresource == "status" && std::string(route->info->resource) == "events") {
    return false;
  }
  return true;
}

using ObjectKey = std::tuple<std::string, std::string, std::string>;  // resource, ns, name

struct Event {
  int64_t rv;
  std::string resource;
  std::string type;  // ADDED, MODIFIED, DELETED
  json object;
  json old_object;  // null for ADDED
};

struct Fault {
  std::string method;
  std::string prefix;
  int code;
  int count;
  std::optional<bool> watch;
  std::string reason;
};

}  // namespace

// ---------------------------------------------------------------- state

struct FakeApiServer::State {
  Options options;
  std::string token;

  mutable std::mutex mu;
  std::condition_variable changed;  // Wakes watch streams.
  mutable std::condition_variable watches_changed;

  int64_t rv = 100;
  int64_t compacted = 0;
  int64_t uid_counter = 0;
  std::map<ObjectKey, json> objects;
  std::vector<Event> log;
  std::vector<Fault> faults;
  std::vector<RecordedRequest> requests;
  int drop_generation = 0;
  int bookmark_generation = 0;
  bool hold = false;
  bool stopping = false;
  int open_watches = 0;

  std::unique_ptr<httplib::SSLServer> server;
  std::thread thread;
  int port = 0;
  std::string dir;
  std::string ca_pem, ca_file, client_cert_pem, client_key_pem;

  // --- object store; callers hold mu ---

  void Record(const std::string& resource, const std::string& type, const json& object,
              const json& old_object) {
    log.push_back({rv, resource, type, object, old_object});
    changed.notify_all();
  }

  // Stores `object` (new or replacing) under a fresh resourceVersion and logs the event.
  json StoreLocked(const ResourceInfo& info, json object) {
    const std::string ns = info.namespaced ? Str(object, "metadata", "namespace") : "";
    const std::string name = Str(object, "metadata", "name");
    ObjectKey key{info.resource, ns, name};
    auto it = objects.find(key);
    json old = it == objects.end() ? json() : it->second;
    object["kind"] = info.kind;
    object["apiVersion"] = "v1";
    json& meta = object["metadata"];
    if (!info.namespaced) meta.erase("namespace");
    if (old.is_null()) {
      meta["uid"] = "uid-" + std::to_string(++uid_counter);
      meta["creationTimestamp"] = Rfc3339(std::chrono::system_clock::now());
    } else {
      meta["uid"] = old["metadata"]["uid"];
      meta["creationTimestamp"] = old["metadata"]["creationTimestamp"];
    }
    meta["resourceVersion"] = std::to_string(++rv);
    objects[key] = object;
    Record(info.resource, old.is_null() ? "ADDED" : "MODIFIED", object, old);
    return object;
  }

  bool DeleteLocked(const ResourceInfo& info, const std::string& ns, const std::string& name,
                    json* deleted) {
    auto it = objects.find(ObjectKey{info.resource, info.namespaced ? ns : "", name});
    if (it == objects.end()) return false;
    json object = std::move(it->second);
    objects.erase(it);
    object["metadata"]["resourceVersion"] = std::to_string(++rv);
    Record(info.resource, "DELETED", object, object);
    if (deleted) *deleted = object;
    return true;
  }

  // --- request handling ---

  void Handle(const httplib::Request& req, httplib::Response& res);
  void HandleList(const Route& route, const RecordedRequest& rec, const Selector& selector,
                  httplib::Response& res);
  void HandleWatch(const Route& route, const RecordedRequest& rec, const Selector& selector,
                   httplib::Response& res, std::unique_lock<std::mutex>& lock);
  void HandleCreate(const Route& route, const RecordedRequest& rec, httplib::Response& res);
  void HandleBinding(const Route& route, const RecordedRequest& rec, httplib::Response& res);
  void HandlePatch(const Route& route, const RecordedRequest& rec, httplib::Response& res);
  void HandleDelete(const Route& route, const RecordedRequest& rec, httplib::Response& res);
};

namespace {

std::string NotFoundMessage(const Route& route) {
  return std::string(route.info->resource) + " \"" + route.name + "\" not found";
}

std::string ConflictMessage(const Route& route) {
  return "Operation cannot be fulfilled on " + std::string(route.info->resource) + " \"" +
         route.name + "\": the object has been modified; please apply your changes to the " +
         "latest version and try again";
}

}  // namespace

void FakeApiServer::State::Handle(const httplib::Request& req, httplib::Response& res) {
  RecordedRequest rec;
  rec.method = req.method;
  rec.path = req.path;
  for (const auto& [k, v] : req.params) rec.query.emplace(k, v);
  rec.content_type = req.get_header_value("Content-Type");
  rec.authorization = req.get_header_value("Authorization");
  rec.body = req.body;
  if (rec.method != "GET" && options.write_latency.count() > 0) {
    std::this_thread::sleep_for(options.write_latency);
  }

  std::unique_lock<std::mutex> lock(mu);
  requests.push_back(rec);
  if (rec.authorization != "Bearer " + token) {
    Fail(res, 401, "Unauthorized");
    return;
  }
  for (auto it = faults.begin(); it != faults.end(); ++it) {
    if ((!it->method.empty() && it->method != rec.method) || rec.path.rfind(it->prefix, 0) != 0 ||
        (it->watch.has_value() && *it->watch != rec.is_watch())) {
      continue;
    }
    int code = it->code;
    std::string reason = it->reason;
    if (--it->count <= 0) faults.erase(it);
    Fail(res, code, "injected failure", reason);
    return;
  }
  Route route;
  if (!ParseRoute(rec.path, &route)) {
    Fail(res, 404, "the server could not find the requested resource");
    return;
  }
  if (rec.method == "GET") {
    if (!route.name.empty()) {
      if (route.subresource == "binding") {
        Fail(res, 405, "binding supports only POST");
        return;
      }
      auto it = objects.find(ObjectKey{route.info->resource, route.ns, route.name});
      if (it == objects.end()) {
        Fail(res, 404, NotFoundMessage(route));
      } else {
        Reply(res, 200, it->second);
      }
      return;
    }
    Selector selector;
    std::string error;
    if (!ParseSelector(rec.Param("labelSelector"), true, &selector.labels, &error) ||
        !ParseSelector(rec.Param("fieldSelector"), false, &selector.fields, &error)) {
      Fail(res, 400, "unable to parse requirement: " + error);
      return;
    }
    for (const Requirement& r : selector.fields) {
      const auto& allowed = route.info->fields;
      if (r.key != "metadata.name" && r.key != "metadata.namespace" &&
          std::find(allowed.begin(), allowed.end(), r.key) == allowed.end()) {
        Fail(res, 400, "field label not supported: " + r.key);
        return;
      }
    }
    if (rec.is_watch()) {
      HandleWatch(route, rec, selector, res, lock);
    } else {
      HandleList(route, rec, selector, res);
    }
  } else if (rec.method == "POST") {
    if (route.subresource == "binding") {
      HandleBinding(route, rec, res);
    } else if (route.name.empty()) {
      HandleCreate(route, rec, res);
    } else {
      Fail(res, 405, "POST is only for collections and pods/binding");
    }
  } else if (rec.method == "PATCH") {
    HandlePatch(route, rec, res);
  } else if (rec.method == "DELETE") {
    HandleDelete(route, rec, res);
  } else {
    Fail(res, 405, rec.method + " is not supported by the fake");
  }
}

void FakeApiServer::State::HandleList(const Route& route, const RecordedRequest& rec,
                                      const Selector& selector, httplib::Response& res) {
  // Continue tokens are "<list resourceVersion>/<ns>/<name of the last item returned>".
  int64_t list_rv = rv;
  std::string after_ns, after_name;
  bool has_after = false;
  const std::string cont = rec.Param("continue");
  if (!cont.empty()) {
    size_t a = cont.find('/');
    size_t b = a == std::string::npos ? a : cont.find('/', a + 1);
    if (b == std::string::npos) {
      Fail(res, 400, "invalid continue token");
      return;
    }
    list_rv = std::stoll(cont.substr(0, a));
    after_ns = cont.substr(a + 1, b - a - 1);
    after_name = cont.substr(b + 1);
    has_after = true;
    if (list_rv < compacted) {
      Fail(res, 410,
           "The provided continue parameter is too old to display a consistent list result. "
           "You can start a new list without the continue parameter.");
      return;
    }
  }
  int64_t limit = 0;
  if (rec.HasParam("limit")) limit = std::atoll(rec.Param("limit").c_str());

  json items = json::array();
  std::string next;
  int64_t remaining = 0;
  for (const auto& [key, object] : objects) {
    const auto& [resource, ns, name] = key;
    if (resource != route.info->resource) continue;
    if (!route.ns.empty() && ns != route.ns) continue;
    if (has_after && std::tie(ns, name) <= std::tie(after_ns, after_name)) continue;
    if (!selector.Matches(object)) continue;
    if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
      ++remaining;
      continue;
    }
    json item = object;
    // The API server leaves kind and apiVersion to the list.
    item.erase("kind");
    item.erase("apiVersion");
    items.push_back(std::move(item));
    if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
      next = std::to_string(list_rv) + "/" + ns + "/" + name;
    }
  }
  json meta = {{"resourceVersion", std::to_string(list_rv)}};
  if (remaining > 0) {
    meta["continue"] = next;
    meta["remainingItemCount"] = remaining;
  }
  Reply(res, 200,
        {{"kind", std::string(route.info->kind) + "List"},
         {"apiVersion", "v1"},
         {"metadata", meta},
         {"items", items}});
}

namespace {

// One open watch stream.
struct WatchStream {
  std::string resource;
  std::string ns;
  Selector selector;
  size_t cursor = 0;  // Next log entry to look at.
  std::vector<std::string> pending;
  int drop_generation = 0;
  int bookmark_generation = 0;
  bool bookmarks = false;
  Clock::time_point deadline;
};

std::string EventLine(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

// The event `e` as this stream reports it: objects entering or leaving the selector show up as
// ADDED or DELETED, as on the API server. "" when the stream does not see it.
std::string Translate(const WatchStream& ws, const Event& e, const json** object) {
  if (e.resource != ws.resource) return "";
  if (!ws.ns.empty() && Str(e.object, "metadata", "namespace") != ws.ns) return "";
  *object = &e.object;
  bool now = ws.selector.Matches(e.object);
  if (e.type == "ADDED") return now ? "ADDED" : "";
  if (e.type == "DELETED") return now ? "DELETED" : "";
  bool before = ws.selector.Matches(e.old_object);
  if (before && now) return "MODIFIED";
  if (now) return "ADDED";
  if (before) return "DELETED";
  return "";
}

}  // namespace

void FakeApiServer::State::HandleWatch(const Route& route, const RecordedRequest& rec,
                                       const Selector& selector, httplib::Response& res,
                                       std::unique_lock<std::mutex>& lock) {
  if (!route.name.empty()) {
    Fail(res, 405, "watch a collection (with a metadata.name field selector) instead");
    return;
  }
  auto ws = std::make_shared<WatchStream>();
  ws->resource = route.info->resource;
  ws->ns = route.ns;
  ws->selector = selector;
  ws->bookmarks = rec.Param("allowWatchBookmarks") == "true";
  int64_t timeout =
      rec.HasParam("timeoutSeconds") ? std::atoll(rec.Param("timeoutSeconds").c_str()) : 1800;
  ws->deadline = Clock::now() + std::chrono::seconds(timeout);
  ws->drop_generation = drop_generation;
  ws->bookmark_generation = bookmark_generation;

  const std::string from = rec.Param("resourceVersion");
  if (from.empty() || from == "0") {
    // Start with the current state, as synthetic ADDED events.
    for (const auto& [key, object] : objects) {
      if (std::get<0>(key) != ws->resource) continue;
      if (!ws->ns.empty() && std::get<1>(key) != ws->ns) continue;
      if (selector.Matches(object)) ws->pending.push_back(EventLine("ADDED", object));
    }
    ws->cursor = log.size();
  } else {
    char* end = nullptr;
    int64_t since = std::strtoll(from.c_str(), &end, 10);
    if (*end != '\0') {
      Fail(res, 400, "invalid resourceVersion \"" + from + "\"");
      return;
    }
    if (since < compacted) {
      const std::string message =
          "too old resource version: " + from + " (" + std::to_string(compacted) + ")";
      if (options.gone_as_http_status) {
        Fail(res, 410, message, "Expired");
      } else {
        res.status = 200;
        res.set_content(EventLine("ERROR", StatusObject(410, "Expired", message)),
                        "application/json");
      }
      return;
    }
    ws->cursor = log.size();
    while (ws->cursor > 0 && log[ws->cursor - 1].rv > since) --ws->cursor;
  }
  ++open_watches;
  watches_changed.notify_all();
  lock.unlock();

  res.status = 200;
  res.set_chunked_content_provider(
      "application/json",
      [this, ws](size_t, httplib::DataSink& sink) {
        std::vector<std::string> lines;
        bool drop = false;
        bool done = false;
        {
          std::unique_lock<std::mutex> guard(mu);
          auto ready = [&] {
            return stopping || drop_generation != ws->drop_generation ||
                   Clock::now() >= ws->deadline ||
                   (!hold && (!ws->pending.empty() || ws->cursor < log.size() ||
                              bookmark_generation != ws->bookmark_generation));
          };
          // Short waits: httplib checks for server shutdown between calls.
          changed.wait_for(guard, std::chrono::milliseconds(50), ready);
          if (stopping || drop_generation != ws->drop_generation) {
            drop = true;
          } else if (!hold) {
            lines = std::move(ws->pending);
            ws->pending.clear();
            for (; ws->cursor < log.size(); ++ws->cursor) {
              const json* object = nullptr;
              std::string type = Translate(*ws, log[ws->cursor], &object);
              if (!type.empty()) lines.push_back(EventLine(type, *object));
            }
            if (bookmark_generation != ws->bookmark_generation) {
              ws->bookmark_generation = bookmark_generation;
              if (ws->bookmarks) {
                lines.push_back(EventLine(
                    "BOOKMARK", {{"kind", ByResource(ws->resource)->kind},
                                 {"apiVersion", "v1"},
                                 {"metadata", {{"resourceVersion", std::to_string(rv)}}}}));
              }
            }
          }
          done = lines.empty() && Clock::now() >= ws->deadline;
        }
        // Returning false makes httplib close the connection without ending the chunked body:
        // to the client that is a dropped connection.
        if (drop) return false;
        for (const std::string& line : lines) {
          if (!sink.write(line.data(), line.size())) return false;
        }
        if (done) sink.done();
        return true;
      },
      [this](bool) {
        std::lock_guard<std::mutex> guard(mu);
        --open_watches;
        watches_changed.notify_all();
      });
}

void FakeApiServer::State::HandleCreate(const Route& route, const RecordedRequest& rec,
                                        httplib::Response& res) {
  if (route.info->namespaced && route.ns.empty()) {
    Fail(res, 405, "create namespaced objects under /api/v1/namespaces/<ns>/");
    return;
  }
  if (rec.content_type != "application/json") {
    Fail(res, 415, "the body of a create must be application/json");
    return;
  }
  json object = json::parse(rec.body, nullptr, false);
  if (object.is_discarded() || !object.is_object()) {
    Fail(res, 400, "the request body is not a JSON object");
    return;
  }
  if (object.contains("kind") && object["kind"] != route.info->kind) {
    Fail(res, 400,
         "the body's kind does not match the path (" + std::string(route.info->kind) + ")");
    return;
  }
  json& meta = object["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (route.info->namespaced) {
    std::string body_ns = Str(object, "metadata", "namespace");
    if (!body_ns.empty() && body_ns != route.ns) {
      Fail(res, 400,
           "the namespace of the provided object does not match the namespace sent "
           "on the request");
      return;
    }
    meta["namespace"] = route.ns;
  }
  std::string name = Str(object, "metadata", "name");
  if (name.empty()) {
    std::string prefix = Str(object, "metadata", "generateName");
    if (prefix.empty()) {
      Fail(res, 422, "metadata.name: Required value: name or generateName is required");
      return;
    }
    name = prefix + std::to_string(100000 + uid_counter * 7919 % 900000);
    meta["name"] = name;
  }
  if (objects.count(ObjectKey{route.info->resource, route.ns, name})) {
    Fail(res, 409, std::string(route.info->resource) + " \"" + name + "\" already exists",
         "AlreadyExists");
    return;
  }
  meta.erase("resourceVersion");
  Reply(res, 201, StoreLocked(*route.info, std::move(object)));
}

void FakeApiServer::State::HandleBinding(const Route& route, const RecordedRequest& rec,
                                         httplib::Response& res) {
  json binding = json::parse(rec.body, nullptr, false);
  if (binding.is_discarded() || !binding.is_object()) {
    Fail(res, 400, "the request body is not a JSON object");
    return;
  }
  const std::string node = Str(binding, "target", "name");
  if (node.empty()) {
    Fail(res, 422, "target.name: Required value");
    return;
  }
  auto it = objects.find(ObjectKey{"pods", route.ns, route.name});
  if (it == objects.end()) {
    Fail(res, 404, NotFoundMessage(route));
    return;
  }
  json pod = it->second;
  const std::string uid = Str(binding, "metadata", "uid");
  if (!uid.empty() && uid != Str(pod, "metadata", "uid")) {
    Fail(res, 409,
         "Operation cannot be fulfilled on pods/binding \"" + route.name +
             "\": the UID in the precondition (" + uid + ") does not match the UID in record");
    return;
  }
  const std::string bound = Str(pod, "spec", "nodeName");
  if (!bound.empty()) {
    Fail(res, 409,
         "Operation cannot be fulfilled on pods/binding \"" + route.name + "\": pod " + route.name +
             " is already assigned to node \"" + bound + "\"");
    return;
  }
  pod["spec"]["nodeName"] = node;
  StoreLocked(*route.info, std::move(pod));
  Reply(res, 201,
        {{"kind", "Status"},
         {"apiVersion", "v1"},
         {"metadata", json::object()},
         {"status", "Success"},
         {"code", 201}});
}

void FakeApiServer::State::HandlePatch(const Route& route, const RecordedRequest& rec,
                                       httplib::Response& res) {
  if (route.name.empty() || route.subresource == "binding") {
    Fail(res, 405, "PATCH needs an object path");
    return;
  }
  const bool json_patch = rec.content_type == "application/json-patch+json";
  if (!json_patch && rec.content_type != "application/merge-patch+json" &&
      rec.content_type != "application/strategic-merge-patch+json") {
    Fail(res, 415, "the server does not support patch content type \"" + rec.content_type + "\"");
    return;
  }
  auto it = objects.find(ObjectKey{route.info->resource, route.ns, route.name});
  if (it == objects.end()) {
    Fail(res, 404, NotFoundMessage(route));
    return;
  }
  json patch = json::parse(rec.body, nullptr, false);
  if (patch.is_discarded() || (json_patch ? !patch.is_array() : !patch.is_object())) {
    Fail(res, 400, "the patch is not a JSON " + std::string(json_patch ? "array" : "object"));
    return;
  }
  const json& current = it->second;
  json patched = current;
  if (json_patch) {
    try {
      patched = current.patch(patch);
    } catch (const json::exception& e) {
      Fail(res, 422, std::string("the JSON patch does not apply: ") + e.what());
      return;
    }
  } else {
    // Strategic merge differs only for lists with merge keys, which tests do not rely on.
    patched.merge_patch(patch);
  }
  // A resourceVersion the patch carries (or leaves) is a precondition.
  if (Str(patched, "metadata", "resourceVersion") != Str(current, "metadata", "resourceVersion")) {
    Fail(res, 409, ConflictMessage(route));
    return;
  }
  for (const char* field : {"name", "namespace", "uid"}) {
    if (Str(patched, "metadata", field) != Str(current, "metadata", field)) {
      Fail(res, 422, std::string("metadata.") + field + ": field is immutable");
      return;
    }
  }
  json result = current;
  if (route.subresource == "status") {
    // The status subresource changes only the status.
    if (patched.contains("status")) result["status"] = patched["status"];
  } else {
    result = patched;
    if (current.contains("status")) {
      result["status"] = current["status"];
    } else {
      result.erase("status");
    }
  }
  if (result == current) {
    Reply(res, 200, current);  // A no-op keeps the resourceVersion, as on the API server.
    return;
  }
  Reply(res, 200, StoreLocked(*route.info, std::move(result)));
}

void FakeApiServer::State::HandleDelete(const Route& route, const RecordedRequest& rec,
                                        httplib::Response& res) {
  if (route.name.empty() || !route.subresource.empty()) {
    Fail(res, 405, "DELETE needs an object path");
    return;
  }
  auto it = objects.find(ObjectKey{route.info->resource, route.ns, route.name});
  if (it == objects.end()) {
    Fail(res, 404, NotFoundMessage(route));
    return;
  }
  if (!rec.body.empty()) {
    json options = json::parse(rec.body, nullptr, false);
    if (options.is_discarded() || !options.is_object()) {
      Fail(res, 400, "DeleteOptions are not a JSON object");
      return;
    }
    for (const char* field : {"uid", "resourceVersion"}) {
      std::string want = Str(options, "preconditions", field);
      if (!want.empty() && want != Str(it->second, "metadata", field)) {
        Fail(res, 409,
             "Operation cannot be fulfilled on " + std::string(route.info->resource) + " \"" +
                 route.name + "\": precondition failed: " + field);
        return;
      }
    }
  }
  json deleted;
  DeleteLocked(*route.info, route.ns, route.name, &deleted);
  Reply(res, 200, deleted);
}

// ---------------------------------------------------------------- public API

std::string RecordedRequest::Param(const std::string& key) const {
  auto it = query.find(key);
  return it == query.end() ? "" : it->second;
}

StatusOr<std::unique_ptr<FakeApiServer>> FakeApiServer::Start(Options options) {
  // Clients that hang up on a stream make the server's next write raise SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  auto state = std::make_shared<State>();
  state->options = options;
  state->token = options.token;

  KeyPtr ca_key(EVP_EC_gen("P-256"));
  KeyPtr server_key(EVP_EC_gen("P-256"));
  KeyPtr client_key(EVP_EC_gen("P-256"));
  if (!ca_key || !server_key || !client_key) return InternalError("cannot generate keys");
  CertPtr ca = MakeCert(ca_key.get(), "gpufrac fake apiserver CA", nullptr, nullptr,
                        {{NID_basic_constraints, "critical,CA:TRUE"},
                         {NID_key_usage, "critical,keyCertSign,cRLSign"},
                         {NID_subject_key_identifier, "hash"}});
  if (!ca) return InternalError("cannot make the CA certificate");
  CertPtr server_cert = MakeCert(server_key.get(), "127.0.0.1", ca.get(), ca_key.get(),
                                 {{NID_basic_constraints, "critical,CA:FALSE"},
                                  {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                                  {NID_ext_key_usage, "serverAuth"},
                                  {NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"}});
  CertPtr client_cert = MakeCert(client_key.get(), "fake-client", ca.get(), ca_key.get(),
                                 {{NID_basic_constraints, "critical,CA:FALSE"},
                                  {NID_key_usage, "critical,digitalSignature"},
                                  {NID_ext_key_usage, "clientAuth"}});
  if (!server_cert || !client_cert) return InternalError("cannot make the certificates");
  state->ca_pem = CertPem(ca.get());
  state->client_cert_pem = CertPem(client_cert.get());
  state->client_key_pem = KeyPem(client_key.get());

  char pattern[] = "/tmp/gpufrac-fake-apiserver-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return InternalError("cannot make a temporary directory");
  state->dir = pattern;
  state->ca_file = state->dir + "/ca.crt";
  std::ofstream(state->ca_file) << state->ca_pem;

  X509_STORE* client_cas = nullptr;
  if (options.require_client_cert) {
    client_cas = X509_STORE_new();  // Owned by the server from here on.
    X509_STORE_add_cert(client_cas, ca.get());
  }
  state->server =
      std::make_unique<httplib::SSLServer>(server_cert.get(), server_key.get(), client_cas);
  if (!state->server->is_valid()) return InternalError("cannot set up the TLS server");
  // Every open watch holds a thread; the default pool is as small as 8 on small machines.
  state->server->new_task_queue = [] { return new httplib::ThreadPool(48); };
  State* raw = state.get();  // The server is joined before the state goes away.
  auto handler = [raw](const httplib::Request& req, httplib::Response& res) {
    raw->Handle(req, res);
  };
  state->server->Get(".*", handler);
  state->server->Post(".*", handler);
  state->server->Patch(".*", handler);
  state->server->Delete(".*", handler);
  state->server->Put(".*", handler);
  // cpp-httplib listens with a backlog of 5: a burst of clients connecting at once (as binds do)
  // would wait for SYN retransmissions, seconds that the real API server does not cost. The
  // listening socket is remembered here and given a longer backlog once bound.
  int listening = -1;
  state->server->set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listening = sock;
  });
  state->port = state->server->bind_to_any_port("127.0.0.1");
  if (state->port <= 0) return UnavailableError("cannot bind 127.0.0.1");
  if (listening >= 0) ::listen(listening, SOMAXCONN);
  state->thread = std::thread([raw] { raw->server->listen_after_bind(); });
  for (int i = 0; i < 2000 && !state->server->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<FakeApiServer>(new FakeApiServer(std::move(state)));
}

FakeApiServer::FakeApiServer(std::shared_ptr<State> state) : state_(std::move(state)) {}

FakeApiServer::~FakeApiServer() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
    state_->changed.notify_all();
  }
  state_->server->stop();
  if (state_->thread.joinable()) state_->thread.join();
  std::error_code ec;
  std::filesystem::remove_all(state_->dir, ec);
}

int FakeApiServer::port() const { return state_->port; }
std::string FakeApiServer::url() const {
  return "https://127.0.0.1:" + std::to_string(state_->port);
}
const std::string& FakeApiServer::ca_pem() const { return state_->ca_pem; }
const std::string& FakeApiServer::ca_file() const { return state_->ca_file; }
const std::string& FakeApiServer::client_cert_pem() const { return state_->client_cert_pem; }
const std::string& FakeApiServer::client_key_pem() const { return state_->client_key_pem; }

ClientConfig FakeApiServer::client_config() const {
  ClientConfig config;
  config.server = url();
  config.ca_pem = state_->ca_pem;
  std::lock_guard<std::mutex> lock(state_->mu);
  config.token = state_->token;
  config.timeout = std::chrono::milliseconds(5000);
  return config;
}

void FakeApiServer::set_token(const std::string& token) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->token = token;
}

json FakeApiServer::Put(json object) {
  const ResourceInfo* info = ByKind(object.value("kind", ""));
  if (info == nullptr) {
    throw std::invalid_argument("FakeApiServer::Put: kind must be Pod, Node, Namespace or Event");
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  if (info->namespaced && Str(object, "metadata", "namespace").empty()) {
    object["metadata"]["namespace"] = "default";
  }
  return state_->StoreLocked(*info, std::move(object));
}

bool FakeApiServer::Delete(const std::string& resource, const std::string& ns,
                           const std::string& name) {
  const ResourceInfo* info = ByResource(resource);
  if (info == nullptr) return false;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->DeleteLocked(*info, ns, name, nullptr);
}

std::optional<json> FakeApiServer::Get(const std::string& resource, const std::string& ns,
                                       const std::string& name) const {
  const ResourceInfo* info = ByResource(resource);
  if (info == nullptr) return std::nullopt;
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->objects.find(ObjectKey{resource, info->namespaced ? ns : "", name});
  if (it == state_->objects.end()) return std::nullopt;
  return it->second;
}

std::string FakeApiServer::resource_version() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return std::to_string(state_->rv);
}

void FakeApiServer::FailNext(const std::string& method, const std::string& path_prefix, int code,
                             int count, std::optional<bool> watch, const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->faults.push_back({method, path_prefix, code, count, watch, reason});
}

void FakeApiServer::Compact() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->compacted = state_->rv;
}

void FakeApiServer::DropWatches() {
  std::lock_guard<std::mutex> lock(state_->mu);
  ++state_->drop_generation;
  state_->changed.notify_all();
}

void FakeApiServer::SendBookmarks() {
  std::lock_guard<std::mutex> lock(state_->mu);
  ++state_->bookmark_generation;
  state_->changed.notify_all();
}

void FakeApiServer::HoldWatches(bool hold) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->hold = hold;
  state_->changed.notify_all();
}

int FakeApiServer::open_watches() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->open_watches;
}

bool FakeApiServer::WaitForWatches(int count, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->watches_changed.wait_for(lock, timeout,
                                          [&] { return state_->open_watches >= count; });
}

std::vector<RecordedRequest> FakeApiServer::requests() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->requests;
}

std::vector<RecordedRequest> FakeApiServer::requests(const std::string& method,
                                                     const std::string& path_prefix) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<RecordedRequest> out;
  for (const RecordedRequest& r : state_->requests) {
    if ((method.empty() || r.method == method) && r.path.rfind(path_prefix, 0) == 0) {
      out.push_back(r);
    }
  }
  return out;
}

void FakeApiServer::ClearRequests() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->requests.clear();
}

}  // namespace gpufrac::k8s::testing
