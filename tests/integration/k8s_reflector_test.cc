// Reflector against FakeApiServer: initial sync, following a watch, resuming after dropped
// connections from the last resourceVersion, relisting after 410 Gone, backoff and prompt Stop.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <thread>

#include "k8s/fake_apiserver.h"
#include "k8s/reflector.h"

namespace gpufrac::k8s {
namespace {

using testing::FakeApiServer;
using testing::RecordedRequest;
using namespace std::chrono_literals;

json Pod(const std::string& name, const std::string& node) {
  return {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", {{"nodeName", node}}}};
}

std::string Name(const json& object) { return object["metadata"]["name"]; }

bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

class ReflectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = FakeApiServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto client = ApiClient::Create(server_->client_config());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // A reflector over pods on node-1, recording what the handlers hear.
  std::unique_ptr<Reflector> MakeReflector() {
    ListOptions options;
    options.field_selector = "spec.nodeName=node-1";
    options.page_size = 2;
    Reflector::Handlers handlers;
    handlers.on_upsert = [this](const json& object) {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back("upsert " + Name(object));
    };
    handlers.on_delete = [this](const json& object) {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back("delete " + Name(object));
    };
    ReflectorOptions reflector_options;
    reflector_options.initial_backoff = 10ms;
    reflector_options.max_backoff = 50ms;
    return std::make_unique<Reflector>(*client_, "/api/v1/pods", options, handlers,
                                       reflector_options);
  }

  std::vector<std::string> Log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  bool Heard(const std::string& entry) {
    std::vector<std::string> log = Log();
    return std::find(log.begin(), log.end(), entry) != log.end();
  }
  std::vector<std::string> Names(const Reflector& reflector) {
    std::vector<std::string> names;
    for (const json& object : reflector.Snapshot()) names.push_back(Name(object));
    return names;
  }
  std::vector<RecordedRequest> Watches() {
    std::vector<RecordedRequest> out;
    for (const RecordedRequest& r : server_->requests("GET", "/api/v1/pods")) {
      if (r.is_watch()) out.push_back(r);
    }
    return out;
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<ApiClient> client_;
  std::mutex mu_;
  std::vector<std::string> log_;
};

TEST_F(ReflectorTest, InitialSyncDeliversEveryMatchingObject) {
  for (const char* name : {"a", "b", "c"}) server_->Put(Pod(name, "node-1"));
  server_->Put(Pod("elsewhere", "node-2"));
  auto reflector = MakeReflector();
  EXPECT_FALSE(reflector->synced());
  reflector->Start();
  ASSERT_TRUE(reflector->WaitForSync(5s));
  EXPECT_EQ(Names(*reflector), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(Log(), (std::vector<std::string>{"upsert a", "upsert b", "upsert c"}));
  EXPECT_EQ(reflector->last_resource_version(), server_->resource_version());
  ASSERT_TRUE(reflector->Get("default", "b").has_value());
  EXPECT_FALSE(reflector->Get("default", "elsewhere").has_value());
  // Two pages, then a watch from the list's resourceVersion.
  ASSERT_TRUE(Eventually([&] { return !Watches().empty(); }));
  EXPECT_EQ(server_->requests("GET", "/api/v1/pods").size(), 3u);
  EXPECT_EQ(Watches()[0].Param("resourceVersion"), server_->resource_version());
  EXPECT_EQ(Watches()[0].Param("fieldSelector"), "spec.nodeName=node-1");
  EXPECT_EQ(reflector->counters().lists, 1);
}

TEST_F(ReflectorTest, FollowsTheWatch) {
  server_->Put(Pod("a", "node-1"));
  auto reflector = MakeReflector();
  reflector->Start();
  ASSERT_TRUE(reflector->WaitForSync(5s));
  ASSERT_TRUE(server_->WaitForWatches(1, 5s));
  server_->Put(Pod("b", "node-1"));
  json a = *server_->Get("pods", "default", "a");
  a["metadata"]["labels"]["x"] = "y";
  server_->Put(a);
  server_->Delete("pods", "default", "b");
  ASSERT_TRUE(Eventually([&] { return Heard("delete b"); }));
  EXPECT_EQ(Log(), (std::vector<std::string>{"upsert a", "upsert b", "upsert a", "delete b"}));
  EXPECT_EQ(Names(*reflector), std::vector<std::string>{"a"});
  EXPECT_EQ((*reflector->Get("default", "a"))["metadata"]["labels"]["x"], "y");
  EXPECT_EQ(reflector->last_resource_version(), server_->resource_version());
  EXPECT_EQ(reflector->counters().events, 3);
}

TEST_F(ReflectorTest, DroppedConnectionResumesFromTheLastResourceVersion) {
  server_->Put(Pod("a", "node-1"));
  auto reflector = MakeReflector();
  reflector->Start();
  ASSERT_TRUE(reflector->WaitForSync(5s));
  ASSERT_TRUE(server_->WaitForWatches(1, 5s));
  server_->Put(Pod("b", "node-1"));
  ASSERT_TRUE(Eventually([&] { return Heard("upsert b"); }));
  const std::string seen = reflector->last_resource_version();
  EXPECT_EQ(seen, server_->resource_version());

  server_->DropWatches();
  ASSERT_TRUE(Eventually([&] { return Watches().size() == 2 && server_->open_watches() == 1; }));
  EXPECT_EQ(Watches()[1].Param("resourceVersion"), seen);
  server_->Put(Pod("c", "node-1"));
  ASSERT_TRUE(Eventually([&] { return Heard("upsert c"); }));
  ReflectorCounters counters = reflector->counters();
  EXPECT_EQ(counters.lists, 1);
  EXPECT_EQ(counters.relists, 0);
  EXPECT_EQ(counters.reconnects, 1);
  EXPECT_EQ(counters.errors, 1);
}

TEST_F(ReflectorTest, BookmarksAdvanceTheResumePoint) {
  server_->Put(Pod("a", "node-1"));
  auto reflector = MakeReflector();
  reflector->Start();
  ASSERT_TRUE(reflector->WaitForSync(5s));
  ASSERT_TRUE(server_->WaitForWatches(1, 5s));
  // Changes the reflector does not watch move the resourceVersion on; a bookmark tells it.
  server_->Put(Pod("far", "node-9"));
  server_->Put({{"kind", "Node"}, {"metadata", {{"name", "node-1"}}}});
  server_->SendBookmarks();
  const std::string now = server_->resource_version();
  ASSERT_TRUE(Eventually([&] { return reflector->last_resource_version() == now; }));
  server_->DropWatches();
  ASSERT_TRUE(Eventually([&] { return Watches().size() == 2; }));
  EXPECT_EQ(Watches()[1].Param("resourceVersion"), now);
  EXPECT_EQ(Log(), std::vector<std::string>{"upsert a"});
}

TEST_F(ReflectorTest, GoneRelistsAndDeletesWhatVanished) {
  server_->Put(Pod("a", "node-1"));
  server_->Put(Pod("b", "node-1"));
  auto reflector = MakeReflector();
  reflector->Start();
  ASSERT_TRUE(reflector->WaitForSync(5s));
  ASSERT_TRUE(server_->WaitForWatches(1, 5s));
  // Changes the reflector cannot see before history is compacted away.
  server_->HoldWatches(true);
  server_->Delete("pods", "default", "a");
  server_->Put(Pod("c", "node-1"));
  server_->Compact();
  server_->DropWatches();
  server_->HoldWatches(false);

  ASSERT_TRUE(Eventually([&] { return reflector->counters().relists == 1; }));
  EXPECT_EQ(Names(*reflector), (std::vector<std::string>{"b", "c"}));
  std::vector<std::string> log = Log();
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[2], "delete a");
  EXPECT_TRUE(Heard("upsert c"));
  EXPECT_EQ(reflector->counters().lists, 2);
  EXPECT_EQ(reflector->last_resource_version(), server_->resource_version());
  // The watch after the relist starts from the new list.
  ASSERT_TRUE(Eventually([&] { return Watches().size() == 3; }));
  EXPECT_EQ(Watches()[2].Param("resourceVersion"), server_->resource_version());
}

TEST_F(ReflectorTest, ErrorsBackOffAndRecover) {
  server_->Put(Pod("a", "node-1"));
  server_->FailNext("GET", "/api/v1/pods", 500, 2, /*watch=*/false);
  server_->FailNext("GET", "/api/v1/pods", 503, 2, /*watch=*/true);
  auto reflector = MakeReflector();
  reflector->Start();
  ASSERT_TRUE(reflector->WaitForSync(5s));
  ASSERT_TRUE(server_->WaitForWatches(1, 5s));
  ReflectorCounters counters = reflector->counters();
  EXPECT_EQ(counters.errors, 4);
  EXPECT_EQ(counters.lists, 1);
  EXPECT_EQ(counters.reconnects, 2);
  server_->Put(Pod("b", "node-1"));
  ASSERT_TRUE(Eventually([&] { return Heard("upsert b"); }));
}

TEST_F(ReflectorTest, StopIsPromptWhileAWatchIsOpen) {
  auto reflector = MakeReflector();
  reflector->Start();
  ASSERT_TRUE(reflector->WaitForSync(5s));
  ASSERT_TRUE(server_->WaitForWatches(1, 5s));
  auto start = std::chrono::steady_clock::now();
  reflector->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(reflector->counters().errors, 0);
  server_->Put(Pod("late", "node-1"));
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(Log().empty());
}

TEST_F(ReflectorTest, StopWithoutStartAndTwiceIsFine) {
  auto reflector = MakeReflector();
  reflector->Stop();
  reflector->Stop();
  auto started = MakeReflector();
  started->Start();
  started->Stop();
  started->Stop();
}

}  // namespace
}  // namespace gpufrac::k8s
