// The extender's and agent's API calls as the API server receives them (paths, verbs, bodies,
// resourceVersion preconditions) and how they react to conflicts, against the fake HTTPS API
// server.
#include <gtest/gtest.h>

#include "k8s/api_client.h"
#include "k8s/fake_apiserver.h"
#include "k8s/kube_cluster_api.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {
namespace {

using testing::FakeApiServer;

class KubeClusterApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = FakeApiServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    auto client = ApiClient::Create(server_->client_config());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
    api_ = std::make_unique<KubeClusterApi>(client_.get());
    server_->Put({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "n1"}}}});
    pod_ = server_->Put({{"apiVersion", "v1"},
                         {"kind", "Pod"},
                         {"metadata", {{"name", "p"}, {"namespace", "ns"}}},
                         {"spec", {{"containers", {{{"name", "main"}, {"image", "x"}}}}}}});
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<KubeClusterApi> api_;
  json pod_;
};

TEST_F(KubeClusterApiTest, AnnotatePodCarriesTheResourceVersionAndRemovesEmptyValues) {
  ASSERT_TRUE(api_->AnnotatePod("ns", "p", MetaOf(pod_, "resourceVersion"),
                                {{"gpufrac.io/assignment", "{}"}, {"gone", ""}})
                  .ok());
  auto patches = server_->requests("PATCH", "/api/v1/namespaces/ns/pods/p");
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].content_type, "application/merge-patch+json");
  json body = json::parse(patches[0].body);
  EXPECT_EQ(body["metadata"]["resourceVersion"], MetaOf(pod_, "resourceVersion"));
  EXPECT_EQ(body["metadata"]["annotations"]["gpufrac.io/assignment"], "{}");
  EXPECT_TRUE(body["metadata"]["annotations"]["gone"].is_null());
  // The pod changed since: the same write is refused as a conflict.
  Status stale = api_->AnnotatePod("ns", "p", MetaOf(pod_, "resourceVersion"), {{"a", "b"}});
  EXPECT_EQ(stale.code(), StatusCode::kAborted) << stale.ToString();
  // And a pod that is gone is NotFound.
  server_->Delete("pods", "ns", "p");
  EXPECT_EQ(api_->AnnotatePod("ns", "p", "", {{"a", "b"}}).code(), StatusCode::kNotFound);
}

// The extender reads the label gpufrac.io/allow-unenforced off the pod's namespace.
TEST_F(KubeClusterApiTest, GetNamespaceReadsTheNamespaceObject) {
  server_->Put(
      {{"apiVersion", "v1"},
       {"kind", "Namespace"},
       {"metadata", {{"name", "ml"}, {"labels", {{"gpufrac.io/allow-unenforced", "true"}}}}}});
  StatusOr<json> ns = api_->GetNamespace("ml");
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  EXPECT_EQ(LabelOf(*ns, "gpufrac.io/allow-unenforced"), "true");
  EXPECT_EQ(server_->requests("GET", "/api/v1/namespaces/ml").size(), 1u);
  EXPECT_EQ(api_->GetNamespace("nowhere").status().code(), StatusCode::kNotFound);
  // A namespace's pods are still found under it.
  EXPECT_TRUE(api_->GetPod("ns", "p").ok());
}

TEST_F(KubeClusterApiTest, DeletePodOnlyDeletesThePodWithTheGivenUid) {
  // Another pod has the name now: refused as a conflict, and nothing is deleted.
  Status other = api_->DeletePod("ns", "p", "uid-of-an-older-pod");
  EXPECT_EQ(other.code(), StatusCode::kAborted) << other.ToString();
  EXPECT_TRUE(server_->Get("pods", "ns", "p").has_value());
  auto deletes = server_->requests("DELETE", "/api/v1/namespaces/ns/pods/p");
  ASSERT_EQ(deletes.size(), 1u);
  EXPECT_EQ(json::parse(deletes[0].body)["preconditions"]["uid"], "uid-of-an-older-pod");
  // Its own uid deletes it; then it is NotFound.
  ASSERT_TRUE(api_->DeletePod("ns", "p", MetaOf(pod_, "uid")).ok());
  EXPECT_FALSE(server_->Get("pods", "ns", "p").has_value());
  EXPECT_EQ(api_->DeletePod("ns", "p", "").code(), StatusCode::kNotFound);
}

TEST_F(KubeClusterApiTest, BindPostsABindingWithThePodUid) {
  ASSERT_TRUE(api_->BindPod("ns", "p", MetaOf(pod_, "uid"), "n1").ok());
  auto posts = server_->requests("POST", "/api/v1/namespaces/ns/pods/p/binding");
  ASSERT_EQ(posts.size(), 1u);
  json body = json::parse(posts[0].body);
  EXPECT_EQ(body["kind"], "Binding");
  EXPECT_EQ(body["metadata"]["uid"], MetaOf(pod_, "uid"));
  EXPECT_EQ(body["target"]["kind"], "Node");
  EXPECT_EQ(body["target"]["name"], "n1");
  EXPECT_EQ(PodNodeName(*server_->Get("pods", "ns", "p")), "n1");
  // A second bind is refused: the pod is bound.
  EXPECT_EQ(api_->BindPod("ns", "p", MetaOf(pod_, "uid"), "n1").code(), StatusCode::kAborted);
}

// The extender's pending bookings are written so: a merge patch carrying the node's
// resourceVersion, which the API server refuses with 409 Conflict once the node has changed.
TEST_F(KubeClusterApiTest, AnnotateNodeIsConditionalOnTheNodesResourceVersion) {
  StatusOr<json> node = api_->GetNode("n1");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  const std::string version = MetaOf(*node, "resourceVersion");
  ASSERT_TRUE(api_->AnnotateNode("n1", version, {{"gpufrac.io/pending", "[]"}}).ok());
  auto patches = server_->requests("PATCH", "/api/v1/nodes/n1");
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].content_type, "application/merge-patch+json");
  json body = json::parse(patches[0].body);
  EXPECT_EQ(body["metadata"]["resourceVersion"], version);
  EXPECT_EQ(body["metadata"]["annotations"]["gpufrac.io/pending"], "[]");
  EXPECT_EQ(AnnotationOf(*server_->Get("nodes", "", "n1"), "gpufrac.io/pending"), "[]");

  // A second writer that read the same version: 409 Conflict, refused as kAborted.
  Status stale = api_->AnnotateNode("n1", version, {{"gpufrac.io/pending", "[1]"}});
  EXPECT_EQ(stale.code(), StatusCode::kAborted) << stale.ToString();
  EXPECT_EQ(AnnotationOf(*server_->Get("nodes", "", "n1"), "gpufrac.io/pending"), "[]");

  // An empty value removes the annotation.
  node = api_->GetNode("n1");
  ASSERT_TRUE(
      api_->AnnotateNode("n1", MetaOf(*node, "resourceVersion"), {{"gpufrac.io/pending", ""}})
          .ok());
  EXPECT_EQ(AnnotationOf(*server_->Get("nodes", "", "n1"), "gpufrac.io/pending"), "");

  // A node that is gone.
  EXPECT_EQ(api_->GetNode("missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(api_->AnnotateNode("missing", "1", {{"a", "b"}}).code(), StatusCode::kNotFound);
}

TEST_F(KubeClusterApiTest, ListsThePodsOfOneNodeAndPostsEvents) {
  ASSERT_TRUE(api_->BindPod("ns", "p", MetaOf(pod_, "uid"), "n1").ok());
  server_->Put({{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", "other"}, {"namespace", "ns"}}},
                {"spec", {{"nodeName", "n2"}, {"containers", json::array()}}}});
  auto pods = api_->ListPodsOnNode("n1");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 1u);
  EXPECT_EQ(MetaOf((*pods)[0], "name"), "p");
  auto lists = server_->requests("GET", "/api/v1/pods");
  ASSERT_FALSE(lists.empty());
  EXPECT_EQ(lists.back().Param("fieldSelector"), "spec.nodeName=n1");

  api_->PodEvent(pod_, "GpufracAssigned", "on n1: main: GPU 0", /*warning=*/false);
  auto events = server_->requests("POST", "/api/v1/namespaces/ns/events");
  ASSERT_EQ(events.size(), 1u);
  json event = json::parse(events[0].body);
  EXPECT_EQ(event["involvedObject"]["uid"], MetaOf(pod_, "uid"));
  EXPECT_EQ(event["reason"], "GpufracAssigned");
  EXPECT_EQ(event["type"], "Normal");
}

}  // namespace
}  // namespace gpufrac::k8s
