// Where the Kubernetes API server is and how to prove who we are to it: the in-cluster service
// account, or a kubeconfig file. Both produce the same ClientConfig for ApiClient.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace gpufrac::k8s {

struct ClientConfig {
  // "https://host:port", optionally with a path prefix ("https://host/k8s/clusters/c1"). IPv6
  // hosts are bracketed: "https://[fd00::1]:443".
  std::string server;
  // PEM certificates trusted for the server (one or more). Empty: the system's trust store.
  std::string ca_pem;
  // Bearer token. When token_file is set it wins and is re-read whenever the file changes,
  // because projected service-account tokens are rotated by the kubelet.
  std::string token;
  std::string token_file;
  // Client certificate authentication (both or neither).
  std::string client_cert_pem;
  std::string client_key_pem;
  // Disables server certificate verification. For experiments only.
  bool insecure_skip_tls_verify = false;
  // The namespace the configuration points at ("default" when it names none).
  std::string namespace_ = "default";
  // Connect, read and write timeout of each call (a watch's read timeout is its own).
  std::chrono::milliseconds timeout{10000};
};

// The configuration of a pod's service account: KUBERNETES_SERVICE_HOST/PORT from the
// environment, and token, ca.crt and namespace from `account_dir`. kFailedPrecondition outside
// a cluster (variables unset); kNotFound/kInvalidArgument for missing or unreadable files.
StatusOr<ClientConfig> InClusterConfig(
    const std::string& account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// The configuration kubectl would use from the kubeconfig at `path`: the named context, or
// current-context when `context` is empty. Relative file references are resolved against the
// kubeconfig's directory. exec and auth-provider users are refused (kInvalidArgument) because
// running plugins is out of scope: give such users a token (e.g. `kubectl create token`). Every
// error is one line naming the file and the field.
StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// Standard base64 with or without line breaks (kubeconfig's *-data fields); kInvalidArgument
// when `text` is not base64.
StatusOr<std::string> DecodeBase64(const std::string& text);

}  // namespace gpufrac::k8s
