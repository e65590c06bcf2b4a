// What the node agent's tests start with: a fake API server that holds the node, a client of it,
// and a fake kubelet serving registration in `kubelet_dir`.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "k8s/api_client.h"
#include "k8s/fake_apiserver.h"
#include "k8s/fake_kubelet.h"

namespace gpufrac::k8s::testing {

struct FakeNode {
  std::unique_ptr<FakeApiServer> server;
  std::unique_ptr<ApiClient> client;
  std::unique_ptr<FakeKubelet> kubelet;
};

// Starts the three with `node` (a Node object) in the server; the first error otherwise.
inline StatusOr<FakeNode> StartFakeNode(const nlohmann::json& node,
                                        const std::string& kubelet_dir) {
  FakeNode out;
  GPUFRAC_ASSIGN_OR_RETURN(out.server, FakeApiServer::Start());
  out.server->Put(node);
  GPUFRAC_ASSIGN_OR_RETURN(out.client, ApiClient::Create(out.server->client_config()));
  out.kubelet = std::make_unique<FakeKubelet>(kubelet_dir);
  GPUFRAC_RETURN_IF_ERROR(out.kubelet->Start());
  return out;
}

// A Node object with only its name, as the agent's tests begin with.
inline nlohmann::json BareNode(const std::string& name) {
  return {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
}

}  // namespace gpufrac::k8s::testing
