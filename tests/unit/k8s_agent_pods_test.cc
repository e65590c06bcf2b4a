// Which pods the extender takes for the gpufrac agent's, and when a node counts as open.
#include <gtest/gtest.h>

#include "k8s/agent_pods.h"
#include "k8s/test_objects.h"

namespace gpufrac::k8s {
namespace {

using testing::AgentPodObject;

nlohmann::json WithUid(nlohmann::json pod, const std::string& uid) {
  pod["metadata"]["uid"] = uid;
  return pod;
}

TEST(AgentPods, ANodeIsClosedWhileItsAgentPodIsNotReadyAndOpenWithoutOne) {
  AgentPods pods{AgentPodSelector{}};
  EXPECT_TRUE(pods.Open("n1")) << "no agent pod known: the inventory decides";
  EXPECT_EQ(pods.OnPod(WithUid(AgentPodObject("n1", true), "a")), "");
  EXPECT_TRUE(pods.Open("n1"));
  EXPECT_EQ(pods.OnPod(WithUid(AgentPodObject("n1", false), "a")), "");
  EXPECT_FALSE(pods.Open("n1"));
  EXPECT_TRUE(pods.Open("n2"));
  EXPECT_EQ(pods.OnPod(WithUid(AgentPodObject("n1", true), "a")), "n1") << "Ready again";
  EXPECT_TRUE(pods.Open("n1"));
  // A rolling update: the new pod not Ready yet beside the old one that is.
  pods.OnPod(WithUid(AgentPodObject("n1", false), "b"));
  EXPECT_TRUE(pods.Open("n1"));
  pods.OnPodDeleted(WithUid(AgentPodObject("n1", true), "a"));
  EXPECT_FALSE(pods.Open("n1"));
  pods.OnPodDeleted(WithUid(AgentPodObject("n1", false), "b"));
  EXPECT_TRUE(pods.Open("n1"));
}

TEST(AgentPods, APodThatOnlyLooksLikeTheAgentsOpensOrClosesNothing) {
  AgentPods pods{AgentPodSelector{}};
  // The same labels and owner, in a user's namespace.
  pods.OnPod(WithUid(AgentPodObject("n1", false, "team-a"), "x"));
  EXPECT_TRUE(pods.Open("n1"));
  // In the agent's namespace, but not a DaemonSet's.
  pods.OnPod(WithUid(AgentPodObject("n1", false, "gpufrac-system", "ReplicaSet"), "y"));
  EXPECT_TRUE(pods.Open("n1"));
  // The agent's pod not Ready: a Ready look-alike in a user's namespace does not open the node.
  pods.OnPod(WithUid(AgentPodObject("n1", false), "a"));
  pods.OnPod(WithUid(AgentPodObject("n1", true, "team-a"), "z"));
  EXPECT_FALSE(pods.Open("n1"));
  // Without the selector's label it is not the agent's any more.
  nlohmann::json relabelled = WithUid(AgentPodObject("n1", false), "a");
  relabelled["metadata"]["labels"].erase("app.kubernetes.io/name");
  pods.OnPod(relabelled);
  EXPECT_TRUE(pods.Open("n1"));
}

TEST(AgentPods, TheSelectorIsEqualityOnly) {
  auto s = ParseAgentPodSelector("gpufrac", "app=agent, tier==gpu");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ns, "gpufrac");
  EXPECT_EQ(s->labels, (std::map<std::string, std::string>{{"app", "agent"}, {"tier", "gpu"}}));
  for (const char* bad : {"", "app!=agent", "app", "app in (agent)", "=agent", "app="}) {
    EXPECT_FALSE(ParseAgentPodSelector("gpufrac", bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseAgentPodSelector("", "app=agent").ok());
}

}  // namespace
}  // namespace gpufrac::k8s
