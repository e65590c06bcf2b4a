// The TCP listener over TLS: a client that trusts the certificate gets the API (the token still
// required); one speaking plain HTTP gets nothing; a certificate without its key is refused at
// start with a reason.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "node/http_server.h"

namespace gpufrac::node {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class HttpsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("https-test-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // A self-signed certificate for 127.0.0.1, and a second key that is not its.
    const std::string make =
        "cd " + dir_ +
        " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
        "-subj /CN=gpufrac-test -addext subjectAltName=IP:127.0.0.1 -keyout key.pem "
        "-out cert.pem 2>/dev/null && openssl genpkey -algorithm EC -pkeyopt "
        "ec_paramgen_curve:P-256 -out other.pem 2>/dev/null";
    ASSERT_EQ(std::system(make.c_str()), 0) << "openssl could not make a test certificate";
  }
  void TearDown() override { fs::remove_all(dir_); }

  TcpListen Listen(const std::string& key_file) const {
    TcpListen tcp{.address = "127.0.0.1", .port = 0, .token = "s3cret-token-16chars"};
    tcp.tls_cert_pem = ReadFile(dir_ + "/cert.pem");
    tcp.tls_key_pem = ReadFile(dir_ + "/" + key_file);
    return tcp;
  }

  std::string dir_;
};

HttpHandler Ok() {
  return [](const HttpRequest& request) {
    HttpResponse response;
    response.body = "{\"path\":\"" + request.path + "\"}";
    return response;
  };
}

TEST_F(HttpsServerTest, ServesTheApiOverTlsToClientsThatTrustTheCertificate) {
  auto started = HttpServer::Start(std::nullopt, Listen("key.pem"), Ok());
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<HttpServer> server = std::move(started).value();

  httplib::SSLClient client("127.0.0.1", server->tcp_port());
  client.set_ca_cert_path((dir_ + "/cert.pem").c_str());
  client.enable_server_certificate_verification(true);
  auto good = client.Get("/v1/jobs", {{"Authorization", "Bearer s3cret-token-16chars"}});
  ASSERT_TRUE(good) << httplib::to_string(good.error());
  EXPECT_EQ(good->status, 200);
  EXPECT_EQ(good->body, "{\"path\":\"/v1/jobs\"}");
  // The token is still required over TLS.
  auto none = client.Get("/v1/jobs");
  ASSERT_TRUE(none) << httplib::to_string(none.error());
  EXPECT_EQ(none->status, 401);

  // Plain HTTP to the TLS port gets no HTTP answer.
  httplib::Client plain("127.0.0.1", server->tcp_port());
  plain.set_read_timeout(std::chrono::seconds(5));
  auto clear = plain.Get("/v1/jobs", {{"Authorization", "Bearer s3cret-token-16chars"}});
  EXPECT_TRUE(!clear || clear->status != 200);
}

TEST_F(HttpsServerTest, RefusesACertificateWithoutItsKey) {
  auto wrong = HttpServer::Start(std::nullopt, Listen("other.pem"), Ok());
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("not a matching PEM pair"), std::string::npos)
      << wrong.status();
  TcpListen half = Listen("key.pem");
  half.tls_key_pem.clear();
  auto missing = HttpServer::Start(std::nullopt, half, Ok());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("needs both a certificate and its key"),
            std::string::npos)
      << missing.status();
}

}  // namespace
}  // namespace gpufrac::node
