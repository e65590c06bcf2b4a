// Reads the in-cluster service account and kubeconfig files (YAML through yaml-cpp, base64
// through OpenSSL) into a ClientConfig.
#include "k8s/kube_config.h"

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/text.h"

namespace gpufrac::k8s {
namespace {

namespace fs = std::filesystem;

StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFoundError(what + ": " + path + " does not exist");
  std::ifstream in(path, std::ios::binary);
  if (!in) return PermissionDeniedError(what + ": cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The kubeconfig being read, so that every error names the file and the field.
class KubeconfigReader {
 public:
  explicit KubeconfigReader(std::string path)
      : path_(std::move(path)), dir_(fs::path(path_).parent_path()) {}

  Status Error(const std::string& field, const std::string& problem) const {
    return InvalidArgumentError("kubeconfig " + path_ + ": " + field + " " + problem);
  }

  // A string field; empty when absent.
  StatusOr<std::string> String(const YAML::Node& node, const std::string& key,
                               const std::string& where) const {
    const YAML::Node value = node[key];
    if (!value || value.IsNull()) return std::string();
    if (!value.IsScalar()) return Error(where + "." + key, "is not a string");
    return value.as<std::string>();
  }

  StatusOr<bool> Bool(const YAML::Node& node, const std::string& key,
                      const std::string& where) const {
    const YAML::Node value = node[key];
    if (!value || value.IsNull()) return false;
    bool result = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, result)) {
      return Error(where + "." + key, "is not true or false");
    }
    return result;
  }

  // The entry of `list` (clusters, users, contexts) called `name`, as its inner map (`inner`).
  StatusOr<YAML::Node> Named(const YAML::Node& root, const std::string& list,
                             const std::string& inner, const std::string& name) const {
    const YAML::Node entries = root[list];
    if (entries && !entries.IsSequence()) return Error(list, "is not a list");
    if (entries) {
      for (const YAML::Node& entry : entries) {
        if (!entry.IsMap()) return Error(list + "[]", "is not a map");
        GPUFRAC_ASSIGN_OR_RETURN(std::string entry_name, String(entry, "name", list + "[]"));
        if (entry_name != name) continue;
        const YAML::Node value = entry[inner];
        if (!value || !value.IsMap()) {
          return Error(list + "[\"" + name + "\"]." + inner, "is missing or not a map");
        }
        return value;
      }
    }
    return Error(list, "has no entry named \"" + name + "\"");
  }

  // `file_key` names a file (relative to the kubeconfig) and `data_key` carries it in base64;
  // data wins, as in kubectl. Empty when neither is set.
  StatusOr<std::string> FileOrData(const YAML::Node& node, const std::string& file_key,
                                   const std::string& data_key, const std::string& where) const {
    GPUFRAC_ASSIGN_OR_RETURN(std::string data, String(node, data_key, where));
    if (!data.empty()) {
      StatusOr<std::string> decoded = DecodeBase64(data);
      if (!decoded.ok()) return Error(where + "." + data_key, "is not valid base64");
      return decoded;
    }
    GPUFRAC_ASSIGN_OR_RETURN(std::string file, String(node, file_key, where));
    if (file.empty()) return std::string();
    StatusOr<std::string> text = ReadFile(Resolve(file), "file");
    if (!text.ok())
      return Error(where + "." + file_key, "names an unreadable file " + Resolve(file));
    return text;
  }

  std::string Resolve(const std::string& file) const {
    fs::path p(file);
    if (p.is_absolute() || dir_.empty()) return file;
    return (dir_ / p).string();
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  fs::path dir_;
};

StatusOr<ClientConfig> ParseKubeconfig(const KubeconfigReader& reader, const YAML::Node& root,
                                       const std::string& wanted_context) {
  if (!root.IsMap()) return reader.Error("(top level)", "is not a map");
  std::string context_name = wanted_context;
  if (context_name.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(context_name, reader.String(root, "current-context", "(top level)"));
    if (context_name.empty()) {
      return reader.Error("current-context", "is not set; pass a context name");
    }
  }
  GPUFRAC_ASSIGN_OR_RETURN(YAML::Node context,
                           reader.Named(root, "contexts", "context", context_name));
  const std::string context_where = "contexts[\"" + context_name + "\"].context";
  GPUFRAC_ASSIGN_OR_RETURN(std::string cluster_name,
                           reader.String(context, "cluster", context_where));
  if (cluster_name.empty()) return reader.Error(context_where + ".cluster", "is not set");
  GPUFRAC_ASSIGN_OR_RETURN(std::string user_name, reader.String(context, "user", context_where));

  ClientConfig config;
  GPUFRAC_ASSIGN_OR_RETURN(std::string ns, reader.String(context, "namespace", context_where));
  if (!ns.empty()) config.namespace_ = ns;

  GPUFRAC_ASSIGN_OR_RETURN(YAML::Node cluster,
                           reader.Named(root, "clusters", "cluster", cluster_name));
  const std::string cluster_where = "clusters[\"" + cluster_name + "\"].cluster";
  GPUFRAC_ASSIGN_OR_RETURN(config.server, reader.String(cluster, "server", cluster_where));
  if (config.server.empty()) return reader.Error(cluster_where + ".server", "is not set");
  GPUFRAC_ASSIGN_OR_RETURN(config.ca_pem,
                           reader.FileOrData(cluster, "certificate-authority",
                                             "certificate-authority-data", cluster_where));
  GPUFRAC_ASSIGN_OR_RETURN(config.insecure_skip_tls_verify,
                           reader.Bool(cluster, "insecure-skip-tls-verify", cluster_where));

  // A context without a user is legal (anonymous access).
  if (user_name.empty()) return config;
  GPUFRAC_ASSIGN_OR_RETURN(YAML::Node user, reader.Named(root, "users", "user", user_name));
  const std::string user_where = "users[\"" + user_name + "\"].user";
  for (const char* plugin : {"exec", "auth-provider"}) {
    if (user[plugin]) {
      return reader.Error(user_where + "." + plugin,
                          "is not supported (gpufrac runs no credential plugins); give the user "
                          "a token or tokenFile instead, e.g. from `kubectl create token`");
    }
  }
  if (user["username"] || user["password"]) {
    return reader.Error(user_where + ".username",
                        "(basic authentication) is not supported; use a token instead");
  }
  GPUFRAC_ASSIGN_OR_RETURN(config.token, reader.String(user, "token", user_where));
  GPUFRAC_ASSIGN_OR_RETURN(std::string token_file, reader.String(user, "tokenFile", user_where));
  if (!token_file.empty()) {
    config.token_file = reader.Resolve(token_file);
    StatusOr<std::string> token = ReadFile(config.token_file, "token file");
    if (!token.ok()) {
      return reader.Error(user_where + ".tokenFile",
                          "names an unreadable file " + config.token_file);
    }
  }
  GPUFRAC_ASSIGN_OR_RETURN(
      config.client_cert_pem,
      reader.FileOrData(user, "client-certificate", "client-certificate-data", user_where));
  GPUFRAC_ASSIGN_OR_RETURN(config.client_key_pem,
                           reader.FileOrData(user, "client-key", "client-key-data", user_where));
  if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
    return reader.Error(
        user_where + (config.client_cert_pem.empty() ? ".client-certificate" : ".client-key"),
        "is missing (a client certificate needs both certificate and key)");
  }
  return config;
}

}  // namespace

StatusOr<std::string> DecodeBase64(const std::string& text) {
  std::unique_ptr<EVP_ENCODE_CTX, decltype(&EVP_ENCODE_CTX_free)> ctx(EVP_ENCODE_CTX_new(),
                                                                      &EVP_ENCODE_CTX_free);
  if (!ctx) return InternalError("out of memory decoding base64");
  // Decoded data is never longer than its encoding.
  std::string out(text.size() + 3, '\0');
  EVP_DecodeInit(ctx.get());
  int written = 0;
  if (EVP_DecodeUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &written,
                       reinterpret_cast<const unsigned char*>(text.data()),
                       static_cast<int>(text.size())) < 0) {
    return InvalidArgumentError("not valid base64");
  }
  int tail = 0;
  if (EVP_DecodeFinal(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + written, &tail) <
      0) {
    return InvalidArgumentError("not valid base64");
  }
  out.resize(static_cast<size_t>(written + tail));
  return out;
}

StatusOr<ClientConfig> InClusterConfig(const std::string& account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return FailedPreconditionError(
        "not running in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
        "are not set (use a kubeconfig outside a cluster)");
  }
  ClientConfig config;
  std::string h = host;
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  config.server = "https://" + h + ":" + port;

  const std::string dir =
      account_dir.empty() || account_dir.back() == '/' ? account_dir : account_dir + "/";
  config.token_file = dir + "token";
  GPUFRAC_ASSIGN_OR_RETURN(std::string token, ReadFile(config.token_file, "service-account token"));
  if (Trim(token).empty()) {
    return InvalidArgumentError("service-account token: " + config.token_file + " is empty");
  }
  GPUFRAC_ASSIGN_OR_RETURN(config.ca_pem, ReadFile(dir + "ca.crt", "service-account CA"));
  // Older clusters and some test set-ups mount no namespace file; "default" then.
  std::error_code ec;
  if (fs::exists(dir + "namespace", ec)) {
    GPUFRAC_ASSIGN_OR_RETURN(std::string ns, ReadFile(dir + "namespace", "namespace"));
    if (!Trim(ns).empty()) config.namespace_ = Trim(ns);
  }
  return config;
}

StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  GPUFRAC_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "kubeconfig"));
  KubeconfigReader reader(path);
  // yaml-cpp reports malformed documents and type mismatches by throwing; keep that inside.
  try {
    YAML::Node root = YAML::Load(text);
    return ParseKubeconfig(reader, root, context);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("kubeconfig " + path + ": not valid YAML (line " +
                                std::to_string(e.mark.line + 1) + "): " + e.msg);
  }
}

}  // namespace gpufrac::k8s
