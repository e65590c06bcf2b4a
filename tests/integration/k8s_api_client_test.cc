// The API-server client against FakeApiServer: configuration loading, TLS trust, tokens, the
// exact requests each verb sends, error mapping, PatchWithRetry and Watch.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "k8s/api_client.h"
#include "k8s/fake_apiserver.h"
#include "k8s/kube_config.h"

namespace gpufrac::k8s {
namespace {

using testing::FakeApiServer;
using testing::RecordedRequest;
namespace fs = std::filesystem;

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/gpufrac-k8s-test-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string file = path_ + "/" + name;
    fs::create_directories(fs::path(file).parent_path());
    std::ofstream(file) << text;
    return file;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

json Pod(const std::string& ns, const std::string& name, const std::string& node = "",
         const json& labels = json::object()) {
  json pod = {{"kind", "Pod"},
              {"apiVersion", "v1"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}},
              {"status", {{"phase", "Pending"}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

std::string Rv(const json& object) { return object["metadata"]["resourceVersion"]; }

// ------------------------------------------------------------------------- configuration

const char kKubeconfigTemplate[] = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0EgUEVN
- name: prod-cluster
  cluster:
    server: https://[fd00::1]:443
    certificate-authority: certs/ca.crt
    insecure-skip-tls-verify: false
contexts:
- name: dev
  context:
    cluster: dev-cluster
    user: dev-user
- name: prod
  context:
    cluster: prod-cluster
    user: prod-user
    namespace: gpu-jobs
users:
- name: dev-user
  user:
    token: dev-token
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: prod-user
  user:
    tokenFile: secrets/token
    client-certificate: certs/client.crt
    client-key: certs/client.key
)";

TEST(KubeconfigTest, CurrentContextWithDataForms) {
  TempDir dir;
  std::string path = dir.Write("config", kKubeconfigTemplate);
  StatusOr<ClientConfig> config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "CA PEM");
  EXPECT_EQ(config->token, "dev-token");
  EXPECT_EQ(config->client_cert_pem, "CERT");
  EXPECT_EQ(config->client_key_pem, "KEY");
  EXPECT_EQ(config->namespace_, "default");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST(KubeconfigTest, NamedContextWithFilesRelativeToTheKubeconfig) {
  TempDir dir;
  std::string path = dir.Write("kube/config", kKubeconfigTemplate);
  dir.Write("kube/certs/ca.crt", "ca from file");
  dir.Write("kube/certs/client.crt", "cert from file");
  dir.Write("kube/certs/client.key", "key from file");
  dir.Write("kube/secrets/token", "file-token\n");
  StatusOr<ClientConfig> config = LoadKubeconfig(path, "prod");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://[fd00::1]:443");
  EXPECT_EQ(config->ca_pem, "ca from file");
  EXPECT_EQ(config->client_cert_pem, "cert from file");
  EXPECT_EQ(config->client_key_pem, "key from file");
  EXPECT_EQ(config->token_file, dir.path() + "/kube/secrets/token");
  EXPECT_EQ(config->namespace_, "gpu-jobs");
}

TEST(KubeconfigTest, ErrorsNameTheFileAndTheField) {
  TempDir dir;
  std::string path = dir.Write("config", kKubeconfigTemplate);
  // Files of the prod context are missing.
  StatusOr<ClientConfig> config = LoadKubeconfig(path, "prod");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find(path), std::string::npos) << config.status();
  EXPECT_NE(config.status().message().find("clusters[\"prod-cluster\"].cluster."
                                           "certificate-authority"),
            std::string::npos)
      << config.status();

  config = LoadKubeconfig(path, "staging");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("contexts has no entry named \"staging\""),
            std::string::npos)
      << config.status();

  std::string no_server = kKubeconfigTemplate;
  no_server.replace(no_server.find("    server: https://10.0.0.1:6443\n"),
                    std::string("    server: https://10.0.0.1:6443\n").size(), "");
  config = LoadKubeconfig(dir.Write("no-server", no_server));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("clusters[\"dev-cluster\"].cluster.server is not set"),
            std::string::npos)
      << config.status();

  std::string no_current = kKubeconfigTemplate;
  no_current.replace(no_current.find("current-context: dev\n"),
                     std::string("current-context: dev\n").size(), "");
  config = LoadKubeconfig(dir.Write("no-current", no_current));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("current-context"), std::string::npos);

  config = LoadKubeconfig(dir.Write("bad-yaml", "clusters: [\n"));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("not valid YAML"), std::string::npos);

  config = LoadKubeconfig(dir.path() + "/absent");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kNotFound);

  std::string bad_base64 = kKubeconfigTemplate;
  bad_base64.replace(bad_base64.find("Q0EgUEVN"), 8, "Q0$$UEVN");
  config = LoadKubeconfig(dir.Write("bad-base64", bad_base64));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("certificate-authority-data is not valid base64"),
            std::string::npos)
      << config.status();
}

TEST(KubeconfigTest, ExecAndAuthProviderUsersAreRefusedWithAWayOut) {
  TempDir dir;
  std::string text = kKubeconfigTemplate;
  text.replace(text.find("    token: dev-token\n"), std::string("    token: dev-token\n").size(),
               "    exec:\n      command: aws\n      args: [eks, get-token]\n");
  StatusOr<ClientConfig> config = LoadKubeconfig(dir.Write("config", text));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = config.status().message();
  EXPECT_NE(message.find("users[\"dev-user\"].user.exec is not supported"), std::string::npos)
      << message;
  EXPECT_NE(message.find("token"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);

  text = kKubeconfigTemplate;
  text.replace(text.find("    token: dev-token\n"), std::string("    token: dev-token\n").size(),
               "    auth-provider:\n      name: gcp\n");
  config = LoadKubeconfig(dir.Write("config2", text));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("auth-provider is not supported"), std::string::npos);
}

TEST(Base64Test, DecodesWithLineBreaksAndRejectsGarbage) {
  EXPECT_EQ(DecodeBase64("aGVsbG8gd29y\nbGQ=\n").value(), "hello world");
  EXPECT_EQ(DecodeBase64("").value(), "");
  EXPECT_FALSE(DecodeBase64("a$b=").ok());
}

// Sets environment variables for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    if (old) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(InClusterConfigTest, ReadsTheServiceAccountAndTheEnvironment) {
  TempDir dir;
  dir.Write("token", "sa-token\n");
  dir.Write("ca.crt", "cluster CA");
  dir.Write("namespace", "gpufrac-system");
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  StatusOr<ClientConfig> config = InClusterConfig(dir.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->ca_pem, "cluster CA");
  EXPECT_EQ(config->token_file, dir.path() + "/token");
  EXPECT_EQ(config->namespace_, "gpufrac-system");

  ScopedEnv host6("KUBERNETES_SERVICE_HOST", "fd00:10:96::1");
  config = InClusterConfig(dir.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://[fd00:10:96::1]:443");
}

TEST(InClusterConfigTest, OutsideAClusterOrWithoutFilesFails) {
  TempDir dir;
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
    ScopedEnv port("KUBERNETES_SERVICE_PORT", nullptr);
    StatusOr<ClientConfig> config = InClusterConfig(dir.path());
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), StatusCode::kFailedPrecondition);
  }
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  StatusOr<ClientConfig> config = InClusterConfig(dir.path());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kNotFound);
  EXPECT_NE(config.status().message().find("/token"), std::string::npos);
}

// ------------------------------------------------------------------------- fixture

class ApiClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<FakeApiServer>> server = FakeApiServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = NewClient(server_->client_config());
  }

  std::unique_ptr<ApiClient> NewClient(const ClientConfig& config) {
    StatusOr<std::unique_ptr<ApiClient>> client = ApiClient::Create(config);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<ApiClient> client_;
};

// ------------------------------------------------------------------------- TLS and tokens

TEST_F(ApiClientTest, ServerCertificateIsVerifiedAgainstTheConfiguredCa) {
  StatusOr<std::unique_ptr<FakeApiServer>> other = FakeApiServer::Start();
  ASSERT_TRUE(other.ok());
  ClientConfig config = server_->client_config();
  config.ca_pem = (*other)->ca_pem();  // A CA that did not sign this server's certificate.
  auto client = NewClient(config);
  StatusOr<json> result = client->Get("/api/v1/nodes");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(result.status().message().find("TLS verification of " + server_->url() + " failed"),
            std::string::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("CA"), std::string::npos);
  // Nothing reached the server's HTTP layer.
  EXPECT_TRUE(server_->requests().empty());

  {
    // The system trust store (here: the right CA, through OpenSSL's SSL_CERT_FILE) is not
    // consulted when a CA is configured, and is when none is.
    ScopedEnv system_store("SSL_CERT_FILE", server_->ca_file().c_str());
    EXPECT_EQ(NewClient(config)->Get("/api/v1/nodes").status().code(), StatusCode::kUnavailable);
    config.ca_pem.clear();
    EXPECT_TRUE(NewClient(config)->Get("/api/v1/nodes").ok());
  }
  config.ca_pem.clear();
  EXPECT_EQ(NewClient(config)->Get("/api/v1/nodes").status().code(), StatusCode::kUnavailable);

  config.ca_pem = (*other)->ca_pem();
  config.insecure_skip_tls_verify = true;
  client = NewClient(config);
  EXPECT_TRUE(client->Get("/api/v1/nodes").ok());

  EXPECT_TRUE(client_->Get("/api/v1/nodes").ok());
}

TEST_F(ApiClientTest, BadConfigurationIsRefusedUpFront) {
  ClientConfig config = server_->client_config();
  config.server = "http://127.0.0.1:1";
  EXPECT_EQ(ApiClient::Create(config).status().code(), StatusCode::kInvalidArgument);
  config = server_->client_config();
  config.ca_pem = "not a certificate";
  EXPECT_EQ(ApiClient::Create(config).status().code(), StatusCode::kInvalidArgument);
  config = server_->client_config();
  config.client_cert_pem = server_->client_cert_pem();
  EXPECT_EQ(ApiClient::Create(config).status().code(), StatusCode::kInvalidArgument);
}

TEST(ApiClientTlsTest, ClientCertificateAuthentication) {
  FakeApiServer::Options options;
  options.require_client_cert = true;
  StatusOr<std::unique_ptr<FakeApiServer>> server = FakeApiServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientConfig config = (*server)->client_config();
  auto without = ApiClient::Create(config);
  ASSERT_TRUE(without.ok());
  StatusOr<json> refused = (*without)->Get("/api/v1/nodes");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();

  config.client_cert_pem = (*server)->client_cert_pem();
  config.client_key_pem = (*server)->client_key_pem();
  auto with = ApiClient::Create(config);
  ASSERT_TRUE(with.ok()) << with.status();
  StatusOr<json> accepted = (*with)->Get("/api/v1/nodes");
  EXPECT_TRUE(accepted.ok()) << accepted.status();
}

TEST_F(ApiClientTest, KubeconfigDrivesARealConnection) {
  TempDir dir;
  std::string text =
      "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
      "clusters:\n- name: fake\n  cluster:\n    server: " +
      server_->url() + "\n    certificate-authority: " + server_->ca_file() +
      "\ncontexts:\n- name: fake\n  context: {cluster: fake, user: me}\n"
      "users:\n- name: me\n  user:\n    token: fake-token\n";
  StatusOr<ClientConfig> config = LoadKubeconfig(dir.Write("config", text));
  ASSERT_TRUE(config.ok()) << config.status();
  auto client = NewClient(*config);
  EXPECT_TRUE(client->List("/api/v1/pods").ok());
}

TEST_F(ApiClientTest, BearerTokenOnEveryRequestAndWrongTokenIsPermissionDenied) {
  server_->Put(Pod("default", "a"));
  ASSERT_TRUE(client_->Get("/api/v1/namespaces/default/pods/a").ok());
  ASSERT_TRUE(client_->List("/api/v1/pods").ok());
  for (const RecordedRequest& r : server_->requests()) {
    EXPECT_EQ(r.authorization, "Bearer fake-token") << r.path;
  }
  ClientConfig config = server_->client_config();
  config.token = "stolen";
  StatusOr<json> result = NewClient(config)->Get("/api/v1/namespaces/default/pods/a");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(result.status().message().find("HTTP 401"), std::string::npos) << result.status();
}

TEST_F(ApiClientTest, RotatedTokenFileIsPickedUp) {
  TempDir dir;
  std::string token_file = dir.Write("token", "fake-token\n");
  ClientConfig config = server_->client_config();
  config.token = "ignored-when-a-file-is-given";
  config.token_file = token_file;
  auto client = NewClient(config);
  ASSERT_TRUE(client->Get("/api/v1/nodes").ok());

  server_->set_token("rotated-token");
  EXPECT_EQ(client->Get("/api/v1/nodes").status().code(), StatusCode::kPermissionDenied);
  // The kubelet swaps in a new file; make sure its stamp differs even on coarse clocks.
  dir.Write("token.new", "rotated-token");
  fs::last_write_time(dir.path() + "/token.new",
                      fs::last_write_time(token_file) + std::chrono::seconds(2));
  fs::rename(dir.path() + "/token.new", token_file);
  StatusOr<json> after = client->Get("/api/v1/nodes");
  EXPECT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(server_->requests().back().authorization, "Bearer rotated-token");
}

// ------------------------------------------------------------------------- verbs

TEST_F(ApiClientTest, EachVerbSendsTheExactRequest) {
  const std::string pods = "/api/v1/namespaces/team-a/pods";
  StatusOr<json> created = client_->Create(pods, Pod("team-a", "p1"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["uid"].get<std::string>().empty(), false);

  StatusOr<json> got = client_->Get(pods + "/p1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Rv(*got), Rv(*created));

  json merge = {{"metadata", {{"annotations", {{"gpufrac.io/a", "1"}}}}}};
  StatusOr<json> merged = client_->Patch(pods + "/p1", merge, PatchType::kMerge);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ((*merged)["metadata"]["annotations"]["gpufrac.io/a"], "1");

  json strategic = {{"metadata", {{"labels", {{"tier", "gpu"}}}}}};
  ASSERT_TRUE(client_->Patch(pods + "/p1", strategic, PatchType::kStrategicMerge).ok());
  json json_patch = json::array(
      {{{"op", "add"}, {"path", "/metadata/annotations/gpufrac.io~1b"}, {"value", "2"}}});
  StatusOr<json> patched = client_->Patch(pods + "/p1", json_patch, PatchType::kJson);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["metadata"]["annotations"]["gpufrac.io/b"], "2");
  EXPECT_EQ((*patched)["metadata"]["labels"]["tier"], "gpu");

  json status_patch = {{"status", {{"phase", "Running"}}}};
  StatusOr<json> status = client_->Patch(pods + "/p1/status", status_patch);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ((*status)["status"]["phase"], "Running");

  StatusOr<json> deleted = client_->Delete(pods + "/p1");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_FALSE(server_->Get("pods", "team-a", "p1").has_value());

  std::vector<RecordedRequest> r = server_->requests();
  ASSERT_EQ(r.size(), 7u);
  EXPECT_EQ(r[0].method, "POST");
  EXPECT_EQ(r[0].path, pods);
  EXPECT_EQ(r[0].content_type, "application/json");
  EXPECT_EQ(json::parse(r[0].body), Pod("team-a", "p1"));
  EXPECT_TRUE(r[0].query.empty());
  EXPECT_EQ(r[1].method, "GET");
  EXPECT_EQ(r[1].path, pods + "/p1");
  EXPECT_TRUE(r[1].body.empty());
  EXPECT_EQ(r[2].method, "PATCH");
  EXPECT_EQ(r[2].content_type, "application/merge-patch+json");
  EXPECT_EQ(json::parse(r[2].body), merge);
  EXPECT_EQ(r[3].content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(json::parse(r[3].body), strategic);
  EXPECT_EQ(r[4].content_type, "application/json-patch+json");
  EXPECT_EQ(json::parse(r[4].body), json_patch);
  EXPECT_EQ(r[5].path, pods + "/p1/status");
  EXPECT_EQ(r[6].method, "DELETE");
  EXPECT_EQ(r[6].path, pods + "/p1");
  EXPECT_TRUE(r[6].body.empty());
}

TEST_F(ApiClientTest, DeleteSendsOptionsAsBody) {
  json pod = server_->Put(Pod("default", "p"));
  json options = {{"preconditions", {{"resourceVersion", "1"}}}};
  StatusOr<json> refused = client_->Delete("/api/v1/namespaces/default/pods/p", options);
  EXPECT_EQ(refused.status().code(), StatusCode::kAborted) << refused.status();
  options["preconditions"]["resourceVersion"] = Rv(pod);
  EXPECT_TRUE(client_->Delete("/api/v1/namespaces/default/pods/p", options).ok());
  RecordedRequest last = server_->requests().back();
  EXPECT_EQ(last.content_type, "application/json");
  EXPECT_EQ(json::parse(last.body), options);
}

TEST_F(ApiClientTest, ListFollowsContinueAndEncodesSelectors) {
  for (int i = 0; i < 5; ++i) {
    server_->Put(Pod("default", "gpu-" + std::to_string(i), i % 2 ? "node-1" : "node-2",
                     {{"app", "train"}}));
  }
  server_->Put(Pod("default", "web", "node-1", {{"app", "web"}}));
  ListOptions options;
  options.page_size = 2;
  options.label_selector = "app=train,tier!=db";
  options.field_selector = "spec.nodeName!=node-3,status.phase=Pending";
  StatusOr<json> list = client_->List("/api/v1/pods", options);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ((*list)["items"].size(), 5u);
  EXPECT_EQ((*list)["items"][4]["metadata"]["name"], "gpu-4");
  EXPECT_EQ((*list)["kind"], "PodList");
  EXPECT_EQ((*list)["metadata"]["resourceVersion"], server_->resource_version());
  EXPECT_FALSE((*list)["metadata"].contains("continue"));

  std::vector<RecordedRequest> r = server_->requests("GET", "/api/v1/pods");
  ASSERT_EQ(r.size(), 3u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].Param("limit"), "2");
    EXPECT_EQ(r[i].Param("labelSelector"), "app=train,tier!=db");
    EXPECT_EQ(r[i].Param("fieldSelector"), "spec.nodeName!=node-3,status.phase=Pending");
    EXPECT_EQ(r[i].HasParam("continue"), i > 0);
    EXPECT_FALSE(r[i].HasParam("watch"));
  }
  EXPECT_NE(r[1].Param("continue"), r[2].Param("continue"));

  options = ListOptions();
  options.field_selector = "spec.nodeName=node-1";
  list = client_->List("/api/v1/namespaces/default/pods", options);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["items"].size(), 3u);  // gpu-1, gpu-3, web
}

TEST_F(ApiClientTest, ErrorsMapToStatusCodesWithVerbPathAndServerMessage) {
  StatusOr<json> missing = client_->Get("/api/v1/namespaces/default/pods/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "GET /api/v1/namespaces/default/pods/nope: HTTP 404 NotFound: pods \"nope\" not "
            "found");

  ASSERT_TRUE(client_->Create("/api/v1/nodes", {{"metadata", {{"name", "n1"}}}}).ok());
  StatusOr<json> again = client_->Create("/api/v1/nodes", {{"metadata", {{"name", "n1"}}}});
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("POST /api/v1/nodes: HTTP 409 AlreadyExists"),
            std::string::npos)
      << again.status();

  json stale = {{"metadata", {{"resourceVersion", "1"}, {"labels", {{"a", "b"}}}}}};
  StatusOr<json> conflict = client_->Patch("/api/v1/nodes/n1", stale);
  EXPECT_EQ(conflict.status().code(), StatusCode::kAborted);
  EXPECT_NE(conflict.status().message().find("PATCH /api/v1/nodes/n1: HTTP 409 Conflict: "
                                             "Operation cannot be fulfilled"),
            std::string::npos)
      << conflict.status();

  StatusOr<json> invalid = client_->Create("/api/v1/namespaces/default/pods", {{"spec", {}}});
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument) << invalid.status();

  server_->FailNext("GET", "/api/v1/nodes", 503);
  EXPECT_EQ(client_->Get("/api/v1/nodes/n1").status().code(), StatusCode::kUnavailable);
  server_->FailNext("GET", "/api/v1/nodes", 403);
  EXPECT_EQ(client_->Get("/api/v1/nodes/n1").status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(client_->Get("/api/v1/nodes/n1").ok());

  ClientConfig config = server_->client_config();
  config.server = "https://127.0.0.1:1";  // Nothing listens there.
  StatusOr<json> down = NewClient(config)->Get("/api/v1/nodes");
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find("cannot connect to https://127.0.0.1:1"),
            std::string::npos)
      << down.status();
}

TEST_F(ApiClientTest, BindingSetsTheNodeOnceAndNeedsThePod) {
  server_->Put(Pod("default", "p"));
  const std::string path = "/api/v1/namespaces/default/pods/p/binding";
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", "p"}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "node-1"}}}};
  StatusOr<json> bound = client_->Create(path, binding);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ((*bound)["status"], "Success");
  EXPECT_EQ((*server_->Get("pods", "default", "p"))["spec"]["nodeName"], "node-1");
  EXPECT_EQ(client_->Create(path, binding).status().code(), StatusCode::kAborted);
  EXPECT_EQ(client_->Create("/api/v1/namespaces/default/pods/q/binding", binding).status().code(),
            StatusCode::kNotFound);
}

TEST_F(ApiClientTest, CallsFromManyThreadsRunWhileAWatchIsOpen) {
  server_->Put(Pod("default", "p"));
  WatchStopper stopper;
  std::thread watcher([&] {
    client_->Watch(
        "/api/v1/pods", {}, server_->resource_version(),
        [](const std::string&, const json&) { return true; }, &stopper);
  });
  ASSERT_TRUE(server_->WaitForWatches(1, std::chrono::seconds(5)));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        if (client_->Get("/api/v1/namespaces/default/pods/p").ok()) ++ok;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 20);
  stopper.Stop();
  watcher.join();
}

// ------------------------------------------------------------------------- PatchWithRetry

TEST_F(ApiClientTest, PatchWithRetryRereadsAfterAConflict) {
  json first = server_->Put(Pod("default", "p"));
  const std::string path = "/api/v1/namespaces/default/pods/p";
  int calls = 0;
  std::string second_rv;
  StatusOr<json> result =
      PatchWithRetry(*client_, path, [&](const json& current) -> StatusOr<json> {
        if (++calls == 1) {
          // Someone else writes between our read and our patch.
          json other = current;
          other["metadata"]["labels"]["writer"] = "other";
          second_rv = Rv(server_->Put(other));
        }
        return json{{"metadata", {{"annotations", {{"count", std::to_string(calls)}}}}}};
      });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ((*result)["metadata"]["annotations"]["count"], "2");
  EXPECT_EQ((*result)["metadata"]["labels"]["writer"], "other");

  std::vector<RecordedRequest> patches = server_->requests("PATCH", path);
  ASSERT_EQ(patches.size(), 2u);
  EXPECT_EQ(json::parse(patches[0].body)["metadata"]["resourceVersion"], Rv(first));
  EXPECT_EQ(json::parse(patches[1].body)["metadata"]["resourceVersion"], second_rv);
  EXPECT_EQ(patches[1].content_type, "application/merge-patch+json");
  EXPECT_EQ(server_->requests("GET", path).size(), 2u);
}

TEST_F(ApiClientTest, PatchWithRetryGivesUpAfterTheAttempts) {
  server_->Put(Pod("default", "p"));
  const std::string path = "/api/v1/namespaces/default/pods/p";
  server_->FailNext("PATCH", path, 409, 100, std::nullopt, "Conflict");
  auto label = [](const json&) -> StatusOr<json> {
    return json{{"metadata", {{"labels", {{"x", "y"}}}}}};
  };
  StatusOr<json> result = PatchWithRetry(*client_, path, label, 3);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kAborted);
  EXPECT_NE(result.status().message().find("gave up after 3"), std::string::npos);
  EXPECT_EQ(server_->requests("PATCH", path).size(), 3u);

  // make_patch's own error stops at once; so does a non-conflict error.
  result = PatchWithRetry(*client_, path, [](const json&) -> StatusOr<json> {
    return FailedPreconditionError("not mine");
  });
  EXPECT_EQ(result.status(), FailedPreconditionError("not mine"));
  EXPECT_EQ(PatchWithRetry(*client_, path + "x", label).status().code(), StatusCode::kNotFound);
  // An empty patch writes nothing.
  server_->ClearRequests();
  EXPECT_TRUE(PatchWithRetry(*client_, path, [](const json&) -> StatusOr<json> {
                return json::object();
              }).ok());
  EXPECT_TRUE(server_->requests("PATCH", "").empty());
}

// ------------------------------------------------------------------------- Watch

struct Seen {
  std::string type;
  std::string name;
  std::string rv;
};

TEST_F(ApiClientTest, WatchDeliversEventsInOrderWithTheRightQuery) {
  json a = server_->Put(Pod("default", "a"));
  const std::string from = Rv(a);
  std::vector<Seen> seen;
  ListOptions options;
  options.watch_timeout = std::chrono::seconds(30);
  options.label_selector = "app=x";
  WatchResult result;
  std::thread watcher([&] {
    result = client_->Watch("/api/v1/namespaces/default/pods", options, from,
                            [&](const std::string& type, const json& object) {
                              seen.push_back({type, object["metadata"]["name"], Rv(object)});
                              return seen.size() < 4;
                            });
  });
  ASSERT_TRUE(server_->WaitForWatches(1, std::chrono::seconds(5)));
  json b = server_->Put(Pod("default", "b", "", {{"app", "x"}}));
  b["status"]["phase"] = "Running";
  server_->Put(b);
  server_->Put(Pod("other", "c", "", {{"app", "x"}}));  // Another namespace: not seen.
  json a2 = Pod("default", "a", "", {{"app", "x"}});    // Enters the selector: ADDED.
  server_->Put(a2);
  server_->Delete("pods", "default", "b");
  watcher.join();

  EXPECT_EQ(result.end, WatchEnd::kStopped);
  EXPECT_EQ(result.events, 4);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].type + seen[0].name, "ADDEDb");
  EXPECT_EQ(seen[1].type + seen[1].name, "MODIFIEDb");
  EXPECT_EQ(seen[2].type + seen[2].name, "ADDEDa");
  EXPECT_EQ(seen[3].type + seen[3].name, "DELETEDb");
  for (size_t i = 1; i < seen.size(); ++i)
    EXPECT_LT(std::stoll(seen[i - 1].rv), std::stoll(seen[i].rv));

  RecordedRequest w = server_->requests("GET", "/api/v1/namespaces/default/pods").at(0);
  EXPECT_EQ(w.Param("watch"), "1");
  EXPECT_EQ(w.Param("resourceVersion"), from);
  EXPECT_EQ(w.Param("allowWatchBookmarks"), "true");
  EXPECT_EQ(w.Param("timeoutSeconds"), "30");
  EXPECT_EQ(w.Param("labelSelector"), "app=x");
}

TEST_F(ApiClientTest, WatchEndsAreDistinguishable) {
  server_->Put(Pod("default", "a"));
  auto all = [](const std::string&, const json&) { return true; };
  ListOptions options;

  // The server's timeout: a normal end.
  options.watch_timeout = std::chrono::seconds(1);
  WatchResult closed = client_->Watch("/api/v1/pods", options, server_->resource_version(), all);
  EXPECT_EQ(closed.end, WatchEnd::kClosed) << closed.status;

  // Too old: 410 as an ERROR event.
  std::string old = server_->resource_version();
  server_->Put(Pod("default", "b"));
  server_->Compact();
  WatchResult gone = client_->Watch("/api/v1/pods", options, old, all);
  EXPECT_EQ(gone.end, WatchEnd::kGone);
  EXPECT_EQ(gone.events, 0);
  EXPECT_NE(gone.status.message().find("too old resource version"), std::string::npos)
      << gone.status;

  // An error status.
  server_->FailNext("GET", "/api/v1/pods", 500, 1, /*watch=*/true);
  WatchResult error = client_->Watch("/api/v1/pods", options, server_->resource_version(), all);
  EXPECT_EQ(error.end, WatchEnd::kError);
  EXPECT_EQ(error.status.code(), StatusCode::kUnavailable);

  // A dropped connection.
  options.watch_timeout = std::chrono::seconds(60);
  WatchResult dropped;
  std::thread watcher(
      [&] { dropped = client_->Watch("/api/v1/pods", options, server_->resource_version(), all); });
  ASSERT_TRUE(server_->WaitForWatches(1, std::chrono::seconds(5)));
  server_->DropWatches();
  watcher.join();
  EXPECT_EQ(dropped.end, WatchEnd::kError);
  EXPECT_EQ(dropped.status.code(), StatusCode::kUnavailable) << dropped.status;
}

TEST(ApiClientWatchTest, GoneAsHttpStatusIsGoneToo) {
  FakeApiServer::Options options;
  options.gone_as_http_status = true;
  auto server = FakeApiServer::Start(options);
  ASSERT_TRUE(server.ok());
  auto client = ApiClient::Create((*server)->client_config());
  ASSERT_TRUE(client.ok());
  (*server)->Put(Pod("default", "a"));
  (*server)->Compact();
  WatchResult gone = (*client)->Watch("/api/v1/pods", {}, "1",
                                      [](const std::string&, const json&) { return true; });
  EXPECT_EQ(gone.end, WatchEnd::kGone);
  EXPECT_EQ(gone.status.code(), StatusCode::kAborted);
  EXPECT_NE(gone.status.message().find("HTTP 410"), std::string::npos) << gone.status;
}

TEST_F(ApiClientTest, WatchFromEmptyResourceVersionStartsWithCurrentObjects) {
  server_->Put(Pod("default", "a"));
  server_->Put(Pod("default", "b"));
  std::vector<std::string> seen;
  WatchResult result =
      client_->Watch("/api/v1/pods", {}, "", [&](const std::string& type, const json& object) {
        seen.push_back(type + " " + object["metadata"]["name"].get<std::string>());
        return seen.size() < 2;
      });
  EXPECT_EQ(result.end, WatchEnd::kStopped);
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED a", "ADDED b"}));
  EXPECT_FALSE(server_->requests().back().HasParam("resourceVersion"));
}

TEST_F(ApiClientTest, StopperEndsAQuietWatchPromptly) {
  WatchStopper stopper;
  WatchResult result;
  std::thread watcher([&] {
    result = client_->Watch(
        "/api/v1/nodes", {}, server_->resource_version(),
        [](const std::string&, const json&) { return true; }, &stopper);
  });
  ASSERT_TRUE(server_->WaitForWatches(1, std::chrono::seconds(5)));
  auto start = std::chrono::steady_clock::now();
  stopper.Stop();
  watcher.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(result.end, WatchEnd::kStopped);
  // A stopped stopper stops later watches at once.
  EXPECT_EQ(client_->Watch("/api/v1/nodes", {}, "1", nullptr, &stopper).end, WatchEnd::kStopped);
}

}  // namespace
}  // namespace gpufrac::k8s
