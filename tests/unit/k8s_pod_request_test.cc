// How a pod's GPU request is read: every form a user may write (gpufrac.io resources, MIG and
// model annotations, KAI/Run:ai annotations), every combination that is refused with a message
// naming the key, container order, and the request in words.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "k8s/pod_request.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

json Container(const std::string& name, json limits, json requests = nullptr) {
  json c = {{"name", name}, {"image", "cuda:12"}};
  if (!limits.is_null()) c["resources"]["limits"] = std::move(limits);
  if (!requests.is_null()) c["resources"]["requests"] = std::move(requests);
  return c;
}

json Pod(std::vector<json> containers, json annotations = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "p"}, {"namespace", "default"}, {"annotations", annotations}}},
          {"spec", {{"containers", containers}}}};
}

// A one-container pod ("main") with these limits.
json Simple(json limits, json annotations = json::object()) {
  return Pod({Container("main", std::move(limits))}, std::move(annotations));
}

ContainerRequest Only(const json& pod) {
  StatusOr<PodRequest> r = ParsePodRequest(pod);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->containers.size() != 1) {
    ADD_FAILURE() << "expected one GPU container";
    return {};
  }
  return r->containers[0];
}

// The parse fails with kInvalidArgument; returns the message.
std::string Error(const json& pod) {
  StatusOr<PodRequest> r = ParsePodRequest(pod);
  EXPECT_FALSE(r.ok()) << "parsed a pod that should be refused: " << pod.dump();
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
  return r.status().message();
}

// ---- Valid forms ----

TEST(PodRequestTest, WholeGpus) {
  ContainerRequest r = Only(Simple({{"gpufrac.io/gpu", "2"}}));
  EXPECT_EQ(r.container, "main");
  EXPECT_EQ(r.request.gpus, 2u);
  EXPECT_EQ(r.request.kind, GpuRequest::Kind::kWholeGpus);
  EXPECT_EQ(r.request.memory_bytes, 0u);
  EXPECT_EQ(r.request.fraction_milli, 0u);
  EXPECT_FALSE(r.from_annotations);
}

TEST(PodRequestTest, MemoryPerGpuInMiB) {
  ContainerRequest r = Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "4096"}}));
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.memory_bytes, 4 * kGiB);
  EXPECT_NE(r.request.kind, GpuRequest::Kind::kWholeGpus);
}

TEST(PodRequestTest, SeveralGpusTimesMemory) {
  ContainerRequest r = Only(Simple({{"gpufrac.io/gpu", "2"}, {"gpufrac.io/gpu-memory", "8192"}}));
  EXPECT_EQ(r.request.gpus, 2u);
  EXPECT_EQ(r.request.memory_bytes, 8 * kGiB);
}

TEST(PodRequestTest, Fraction) {
  ContainerRequest r = Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}}));
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.fraction_milli, 250u);
  EXPECT_EQ(r.request.memory_bytes, 0u);
  EXPECT_NE(r.request.kind, GpuRequest::Kind::kWholeGpus);
}

TEST(PodRequestTest, QuantitySuffixes) {
  // "4Ki" MiB is 4096 MiB; "2k" is 2000 MiB; "1k" GPUs is too many, but "1" is one.
  EXPECT_EQ(Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "4Ki"}}))
                .request.memory_bytes,
            4096 * kMiB);
  EXPECT_EQ(
      Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "2k"}})).request.memory_bytes,
      2000 * kMiB);
  EXPECT_EQ(Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "1Mi"}}))
                .request.memory_bytes,
            (uint64_t{1} << 20) * kMiB);
}

TEST(PodRequestTest, JsonNumbers) {
  // As they arrive from the API server: parsed from text.
  ContainerRequest r =
      Only(Simple(json::parse(R"({"gpufrac.io/gpu": 1, "gpufrac.io/gpu-fraction": 500})")));
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.fraction_milli, 500u);
  ContainerRequest m =
      Only(Simple(json::parse(R"({"gpufrac.io/gpu": 3, "gpufrac.io/gpu-memory": 1024})")));
  EXPECT_EQ(m.request.gpus, 3u);
  EXPECT_EQ(m.request.memory_bytes, kGiB);
}

// A pod built in C++ holds positive numbers as signed integers; they are the same quantities.
TEST(PodRequestTest, JsonNumbersBuiltInCode) {
  ContainerRequest r = Only(Simple({{"gpufrac.io/gpu", 1}, {"gpufrac.io/gpu-fraction", 500}}));
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.fraction_milli, 500u);
}

TEST(PodRequestTest, RequestsAreReadWhenThereAreNoLimits) {
  json pod = Pod(
      {Container("main", nullptr, {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "2048"}})});
  ContainerRequest r = Only(pod);
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.memory_bytes, 2 * kGiB);
}

TEST(PodRequestTest, LimitsWinOverRequests) {
  json pod = Pod({Container("main", {{"gpufrac.io/gpu", "2"}}, {{"gpufrac.io/gpu", "1"}})});
  EXPECT_EQ(Only(pod).request.gpus, 2u);
}

TEST(PodRequestTest, MigProfileAnnotationIsLowerCased) {
  ContainerRequest r =
      Only(Simple({{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", "2G.20GB"}}));
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.mig_profile, "2g.20gb");
  EXPECT_NE(r.request.kind, GpuRequest::Kind::kWholeGpus);
}

TEST(PodRequestTest, GpuModelAnnotationAppliesToEveryContainer) {
  json pod = Pod({Container("a", {{"gpufrac.io/gpu", "1"}}),
                  Container("b", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "100"}})},
                 {{"gpufrac.io/gpu-model", "A100-80GB"}});
  StatusOr<PodRequest> r = ParsePodRequest(pod);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->containers.size(), 2u);
  EXPECT_EQ(r->containers[0].request.gpu_model, "A100-80GB");
  EXPECT_EQ(r->containers[1].request.gpu_model, "A100-80GB");
}

TEST(PodRequestTest, KaiFractionOnTheFirstContainer) {
  json pod =
      Pod({Container("first", nullptr), Container("second", nullptr)}, {{"gpu-fraction", "0.5"}});
  ContainerRequest r = Only(pod);
  EXPECT_EQ(r.container, "first");
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.fraction_milli, 500u);
  EXPECT_TRUE(r.from_annotations);
}

TEST(PodRequestTest, KaiMemory) {
  ContainerRequest r = Only(Pod({Container("main", nullptr)}, {{"gpu-memory", "4096"}}));
  EXPECT_EQ(r.request.gpus, 1u);
  EXPECT_EQ(r.request.memory_bytes, 4 * kGiB);
  EXPECT_EQ(r.request.fraction_milli, 0u);
  EXPECT_TRUE(r.from_annotations);
}

TEST(PodRequestTest, KaiOnANamedContainer) {
  json pod = Pod({Container("sidecar", nullptr), Container("worker", nullptr)},
                 {{"gpu-fraction", "0.25"}, {"gpu-fraction-container-name", "worker"}});
  ContainerRequest r = Only(pod);
  EXPECT_EQ(r.container, "worker");
  EXPECT_EQ(r.request.fraction_milli, 250u);
}

TEST(PodRequestTest, KaiNumberOfDevices) {
  json pod = Pod({Container("main", nullptr)},
                 {{"gpu-fraction", "0.5"}, {"gpu-fraction-num-devices", "2"}});
  ContainerRequest r = Only(pod);
  EXPECT_EQ(r.request.gpus, 2u);
  EXPECT_EQ(r.request.fraction_milli, 500u);
}

TEST(PodRequestTest, ContainersKeepThePodsOrder) {
  json pod = Pod({Container("a", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}}),
                  Container("no-gpu", {{"cpu", "2"}}), Container("c", {{"gpufrac.io/gpu", "2"}}),
                  Container("d", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "1024"}})});
  StatusOr<PodRequest> r = ParsePodRequest(pod);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->containers.size(), 3u);
  EXPECT_EQ(r->containers[0].container, "a");
  EXPECT_EQ(r->containers[0].request.fraction_milli, 250u);
  EXPECT_EQ(r->containers[1].container, "c");
  EXPECT_EQ(r->containers[1].request.gpus, 2u);
  EXPECT_EQ(r->containers[2].container, "d");
  EXPECT_EQ(r->containers[2].request.memory_bytes, kGiB);
}

// Who each container runs as, for MPS GPUs (one user's clients at a time): the container's
// runAsUser, else the pod's, else its image (whose USER the scheduler cannot see).
TEST(PodRequestTest, EachContainerRunsAsItsOwnThenThePodsUserElseItsImages) {
  json own = Container("own", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}});
  own["securityContext"]["runAsUser"] = 2000;
  json inherits = Container("inherits", {{"gpufrac.io/gpu", "1"}});
  json pod = Pod({own, inherits});
  pod["spec"]["securityContext"]["runAsUser"] = 1000;
  StatusOr<PodRequest> r = ParsePodRequest(pod);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->containers.size(), 2u);
  EXPECT_EQ(r->containers[0].run_as, "uid 2000");
  EXPECT_EQ(r->containers[1].run_as, "uid 1000");

  EXPECT_EQ(Only(Simple({{"gpufrac.io/gpu", "1"}})).run_as, "image cuda:12");
  json kai = Simple(nullptr, {{"gpu-fraction", "0.5"}});
  kai["spec"]["securityContext"]["runAsUser"] = 0;
  EXPECT_EQ(Only(kai).run_as, "uid 0");

  // In a user namespace of its own, uid 1000 in the pod is a host uid of that pod alone.
  json userns = Simple({{"gpufrac.io/gpu", "1"}});
  userns["spec"]["securityContext"]["runAsUser"] = 1000;
  userns["spec"]["hostUsers"] = false;
  EXPECT_EQ(Only(userns).run_as, "user namespace of pod default/p");
}

TEST(PodRequestTest, KaiContainerKeepsItsPlaceAmongResourceContainers) {
  json pod = Pod({Container("a", {{"gpufrac.io/gpu", "1"}}), Container("b", nullptr),
                  Container("c", {{"gpufrac.io/gpu", "1"}})},
                 {{"gpu-memory", "2048"}, {"gpu-fraction-container-name", "b"}});
  StatusOr<PodRequest> r = ParsePodRequest(pod);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->containers.size(), 3u);
  EXPECT_EQ(r->containers[0].container, "a");
  EXPECT_EQ(r->containers[1].container, "b");
  EXPECT_TRUE(r->containers[1].from_annotations);
  EXPECT_EQ(r->containers[1].request.memory_bytes, 2 * kGiB);
  EXPECT_EQ(r->containers[2].container, "c");
}

TEST(PodRequestTest, PodsWithoutGpusAskForNothing) {
  StatusOr<PodRequest> cpu = ParsePodRequest(Simple({{"cpu", "1"}, {"memory", "1Gi"}}));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->empty());
  StatusOr<PodRequest> no_spec = ParsePodRequest(json{{"metadata", {{"name", "x"}}}});
  ASSERT_TRUE(no_spec.ok()) << no_spec.status();
  EXPECT_TRUE(no_spec->empty());
  // nvidia.com/gpu alone is the NVIDIA device plugin's business, not ours.
  StatusOr<PodRequest> nvidia = ParsePodRequest(Simple({{"nvidia.com/gpu", "1"}}));
  ASSERT_TRUE(nvidia.ok()) << nvidia.status();
  EXPECT_TRUE(nvidia->empty());
  // The model annotation alone asks for no GPU.
  StatusOr<PodRequest> model =
      ParsePodRequest(Simple({{"cpu", "1"}}, {{"gpufrac.io/gpu-model", "H100-80GB"}}));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->empty());
}

// ---- Compute shares ----

TEST(PodRequestTest, ComputeResourceIsThousandthsOfEachGpusTime) {
  ContainerRequest r = Only(Simple({{"gpufrac.io/gpu", "1"},
                                    {"gpufrac.io/gpu-memory", "4096"},
                                    {"gpufrac.io/gpu-compute", "300"}}));
  EXPECT_EQ(r.request.memory_bytes, 4 * kGiB);
  EXPECT_EQ(r.request.compute_milli, 300u);
  EXPECT_EQ(r.request.compute_limit_milli, std::nullopt) << "the node agent's policy decides";
  // As the API server sends it, a number; and with a fraction.
  ContainerRequest f = Only(Simple(json::parse(
      R"({"gpufrac.io/gpu": 2, "gpufrac.io/gpu-fraction": 100, "gpufrac.io/gpu-compute": 450})")));
  EXPECT_EQ(f.request.gpus, 2u);
  EXPECT_EQ(f.request.fraction_milli, 100u);
  EXPECT_EQ(f.request.compute_milli, 450u);
}

TEST(PodRequestTest, ComputeAnnotationsAreSharesAsTheGrammarWritesThem) {
  ContainerRequest r =
      Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}},
                  {{"gpufrac.io/gpu-compute", "0.3"}, {"gpufrac.io/gpu-compute-limit", "70%"}}));
  EXPECT_EQ(r.request.compute_milli, 300u);
  EXPECT_EQ(r.request.compute_limit_milli, 700u);
  // A limit alone (the request is then the memory's share), up to all of the GPU's time.
  ContainerRequest limit = Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "4096"}},
                                       {{"gpufrac.io/gpu-compute-limit", "1"}}));
  EXPECT_EQ(limit.request.compute_milli, std::nullopt);
  EXPECT_EQ(limit.request.compute_limit_milli, 1000u);
  // The limit annotation qualifies a compute resource too.
  ContainerRequest both = Only(Simple({{"gpufrac.io/gpu", "1"},
                                       {"gpufrac.io/gpu-fraction", "250"},
                                       {"gpufrac.io/gpu-compute", "200"}},
                                      {{"gpufrac.io/gpu-compute-limit", "0.5"}}));
  EXPECT_EQ(both.request.compute_milli, 200u);
  EXPECT_EQ(both.request.compute_limit_milli, 500u);
}

TEST(PodRequestTest, ComputeAnnotationsApplyToEveryGpuContainerAndKaiOnes) {
  StatusOr<PodRequest> r = ParsePodRequest(
      Pod({Container("a", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "1024"}}),
           Container("b", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "100"}})},
          {{"gpufrac.io/gpu-compute", "0.2"}}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->containers.size(), 2u);
  EXPECT_EQ(r->containers[0].request.compute_milli, 200u);
  EXPECT_EQ(r->containers[1].request.compute_milli, 200u);
  ContainerRequest kai =
      Only(Pod({Container("main", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-compute", "400"}})},
               {{"gpu-fraction", "0.5"}}));
  EXPECT_TRUE(kai.from_annotations);
  EXPECT_EQ(kai.request.fraction_milli, 500u);
  EXPECT_EQ(kai.request.compute_milli, 400u);
}

TEST(PodRequestTest, ComputeOnWholeGpusOrMigIsRefused) {
  std::string whole = Error(Simple({{"gpufrac.io/gpu", "2"}, {"gpufrac.io/gpu-compute", "500"}}));
  EXPECT_THAT(whole, HasSubstr("container main"));
  EXPECT_THAT(whole, HasSubstr("gpufrac.io/gpu-compute"));
  EXPECT_THAT(whole, HasSubstr("whole GPUs have all of their compute"));
  std::string annotated =
      Error(Simple({{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/gpu-compute-limit", "0.5"}}));
  EXPECT_THAT(annotated, HasSubstr("gpufrac.io/gpu-compute-limit"));
  EXPECT_THAT(annotated, HasSubstr("gpufrac.io/gpu-memory or gpufrac.io/gpu-fraction"));
  std::string mig = Error(Simple({{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", "1g.10gb"},
                                                             {"gpufrac.io/gpu-compute", "0.5"}}));
  EXPECT_THAT(mig, HasSubstr("MIG instance has its own compute"));
  // One line each.
  for (const std::string& m : {whole, annotated, mig}) EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(PodRequestTest, ComputeWithoutAShareToQualify) {
  std::string alone = Error(Simple({{"gpufrac.io/gpu-compute", "300"}}));
  EXPECT_THAT(alone, HasSubstr("gpufrac.io/gpu-compute needs gpufrac.io/gpu"));
  std::string zero = Error(Simple({{"gpufrac.io/gpu", "0"}, {"gpufrac.io/gpu-compute", "300"}}));
  EXPECT_THAT(zero, HasSubstr("gpufrac.io/gpu-compute needs gpufrac.io/gpu"));
  std::string pod = Error(Simple({{"cpu", "1"}}, {{"gpufrac.io/gpu-compute", "0.3"}}));
  EXPECT_THAT(pod, HasSubstr("annotation gpufrac.io/gpu-compute needs a container"));
  std::string limit = Error(Simple({{"cpu", "1"}}, {{"gpufrac.io/gpu-compute-limit", "0.5"}}));
  EXPECT_THAT(limit, HasSubstr("annotation gpufrac.io/gpu-compute-limit needs a container"));
}

TEST(PodRequestTest, ComputeValuesOutOfRange) {
  for (const char* milli : {"0", "1000", "1500", "0.5", "x"}) {
    std::string m = Error(Simple({{"gpufrac.io/gpu", "1"},
                                  {"gpufrac.io/gpu-fraction", "250"},
                                  {"gpufrac.io/gpu-compute", milli}}));
    EXPECT_THAT(m, HasSubstr("container main: gpufrac.io/gpu-compute")) << milli;
  }
  json share = {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}};
  for (const char* bad : {"1", "100%", "0", "-0.2", "1.5", "half"}) {
    std::string m = Error(Simple(share, {{"gpufrac.io/gpu-compute", bad}}));
    EXPECT_THAT(m, HasSubstr("annotation gpufrac.io/gpu-compute")) << bad;
  }
  for (const char* bad : {"1.01", "0", "200%", "lots"}) {
    std::string m = Error(Simple(share, {{"gpufrac.io/gpu-compute-limit", bad}}));
    EXPECT_THAT(m, HasSubstr("annotation gpufrac.io/gpu-compute-limit")) << bad;
  }
}

TEST(PodRequestTest, ComputeLimitBelowItsRequest) {
  std::string m =
      Error(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}},
                   {{"gpufrac.io/gpu-compute", "0.5"}, {"gpufrac.io/gpu-compute-limit", "0.25"}}));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu-compute-limit 0.25 is below its compute request 0.5"));
}

TEST(PodRequestTest, ComputeAsResourceAndAnnotation) {
  std::string m = Error(Simple({{"gpufrac.io/gpu", "1"},
                                {"gpufrac.io/gpu-fraction", "250"},
                                {"gpufrac.io/gpu-compute", "300"}},
                               {{"gpufrac.io/gpu-compute", "0.3"}}));
  EXPECT_THAT(m, HasSubstr("both given"));
}

TEST(PodRequestTest, ComputeResourceOnAnInitContainer) {
  json pod = Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}});
  pod["spec"]["initContainers"] =
      json::array({Container("warmup", {{"gpufrac.io/gpu-compute", "100"}})});
  EXPECT_THAT(Error(pod), HasSubstr("init container warmup"));
}

// ---- Refused combinations: kInvalidArgument naming the key ----

TEST(PodRequestTest, MemoryAndFractionTogether) {
  std::string m = Error(Simple({{"gpufrac.io/gpu", "1"},
                                {"gpufrac.io/gpu-memory", "1024"},
                                {"gpufrac.io/gpu-fraction", "250"}}));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu-memory"));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu-fraction"));
  EXPECT_THAT(m, HasSubstr("main"));
}

TEST(PodRequestTest, MemoryOrFractionWithoutACount) {
  std::string m = Error(Simple({{"gpufrac.io/gpu-memory", "1024"}}));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu-memory"));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu:"));
  std::string f = Error(Simple({{"gpufrac.io/gpu-fraction", "250"}}));
  EXPECT_THAT(f, HasSubstr("gpufrac.io/gpu-fraction"));
  EXPECT_THAT(f, HasSubstr("gpufrac.io/gpu:"));
}

TEST(PodRequestTest, ZeroCountDoesNotBlameAKeyThePodDoesNotHave) {
  StatusOr<PodRequest> r = ParsePodRequest(Simple({{"gpufrac.io/gpu", "0"}}));
  if (r.ok()) {
    EXPECT_TRUE(r->empty());
  } else {
    EXPECT_THAT(r.status().message(), HasSubstr("gpufrac.io/gpu"));
    EXPECT_THAT(r.status().message(), Not(HasSubstr("gpu-fraction")))
        << "the pod has no gpufrac.io/gpu-fraction";
    EXPECT_THAT(r.status().message(), Not(HasSubstr("gpu-memory")));
  }
}

TEST(PodRequestTest, FractionOutOfRange) {
  for (const char* milli : {"0", "1000", "1500"}) {
    std::string m = Error(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", milli}}));
    EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu-fraction")) << milli;
  }
  EXPECT_EQ(Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "1"}}))
                .request.fraction_milli,
            1u);
  EXPECT_EQ(Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "999"}}))
                .request.fraction_milli,
            999u);
}

TEST(PodRequestTest, ZeroMemory) {
  std::string m = Error(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "0"}}));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu-memory"));
}

TEST(PodRequestTest, CountTooLargeOrNotWhole) {
  EXPECT_EQ(Only(Simple({{"gpufrac.io/gpu", "64"}})).request.gpus, 64u);
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", "65"}})), HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", "1k"}})), HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", "1.5"}})), HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", "500m"}})), HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", "two"}})), HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", -1}})), HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", 1.5}})), HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", "99999999999999999999999"}})),
              HasSubstr("gpufrac.io/gpu"));
  EXPECT_THAT(Error(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "1.5Gi"}})),
              HasSubstr("gpufrac.io/gpu-memory"));
}

TEST(PodRequestTest, TogetherWithNvidiaGpu) {
  std::string m = Error(Simple({{"gpufrac.io/gpu", "1"}, {"nvidia.com/gpu", "1"}}));
  EXPECT_THAT(m, HasSubstr("nvidia.com/gpu"));
  EXPECT_THAT(m, HasSubstr("main"));
}

TEST(PodRequestTest, OnAnInitContainer) {
  json pod = Simple({{"cpu", "1"}});
  pod["spec"]["initContainers"] = json::array({Container("warmup", {{"gpufrac.io/gpu", "1"}})});
  std::string m = Error(pod);
  EXPECT_THAT(m, HasSubstr("init container"));
  EXPECT_THAT(m, HasSubstr("warmup"));
  EXPECT_THAT(m, HasSubstr("gpufrac.io"));
}

TEST(PodRequestTest, MigProfileWithMemoryOrFraction) {
  json mig = {{"gpufrac.io/mig-profile", "1g.10gb"}};
  std::string m = Error(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "1024"}}, mig));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/mig-profile"));
  std::string f = Error(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "100"}}, mig));
  EXPECT_THAT(f, HasSubstr("gpufrac.io/mig-profile"));
  std::string k = Error(Pod({Container("main", nullptr)},
                            {{"gpufrac.io/mig-profile", "1g.10gb"}, {"gpu-fraction", "0.5"}}));
  EXPECT_THAT(k, HasSubstr("gpufrac.io/mig-profile"));
}

TEST(PodRequestTest, MigProfileWithSeveralGpus) {
  std::string m = Error(Simple({{"gpufrac.io/gpu", "2"}}, {{"gpufrac.io/mig-profile", "1g.10gb"}}));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/mig-profile"));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu"));
}

TEST(PodRequestTest, MigProfileWithoutAGpuContainer) {
  std::string m = Error(Simple({{"cpu", "1"}}, {{"gpufrac.io/mig-profile", "1g.10gb"}}));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/mig-profile"));
}

TEST(PodRequestTest, MigProfileNamingNoProfile) {
  for (const char* bad : {"big", "10gb", "1g", "g.10gb"}) {
    std::string m = Error(Simple({{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", bad}}));
    EXPECT_THAT(m, HasSubstr("gpufrac.io/mig-profile")) << bad;
  }
}

TEST(PodRequestTest, KaiAnnotationsWithAGpuCountUseTheDevicePlugin) {
  // gpufrac.io/gpu routes the container through gpufrac's device plugin (and quotas); the
  // annotation gives the amount.
  ContainerRequest r = Only(Simple({{"gpufrac.io/gpu", "2"}}, {{"gpu-fraction", "0.5"}}));
  EXPECT_EQ(r.request.gpus, 2u);
  EXPECT_EQ(r.request.fraction_milli, 500u);
  EXPECT_TRUE(r.from_annotations);
  std::string m = Error(Simple({{"gpufrac.io/gpu", "2"}},
                               {{"gpu-fraction", "0.5"}, {"gpu-fraction-num-devices", "3"}}));
  EXPECT_THAT(m, HasSubstr("gpu-fraction-num-devices"));
}

TEST(PodRequestTest, KaiAnnotationsWithGpufracAmountsOnOneContainer) {
  std::string m = Error(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "1024"}},
                               {{"gpu-fraction", "0.5"}}));
  EXPECT_THAT(m, HasSubstr("main"));
  EXPECT_THAT(m, HasSubstr("gpufrac.io/gpu-memory"));
  EXPECT_THAT(m, HasSubstr("KAI"));
}

TEST(PodRequestTest, KaiFractionAndMemoryTogether) {
  std::string m =
      Error(Pod({Container("main", nullptr)}, {{"gpu-fraction", "0.5"}, {"gpu-memory", "1024"}}));
  EXPECT_THAT(m, HasSubstr("gpu-fraction"));
  EXPECT_THAT(m, HasSubstr("gpu-memory"));
}

TEST(PodRequestTest, KaiContainerNameThatDoesNotExist) {
  std::string m = Error(Pod({Container("main", nullptr)},
                            {{"gpu-fraction", "0.5"}, {"gpu-fraction-container-name", "ghost"}}));
  EXPECT_THAT(m, HasSubstr("gpu-fraction-container-name"));
  EXPECT_THAT(m, HasSubstr("ghost"));
}

TEST(PodRequestTest, KaiBadValues) {
  for (const char* devices : {"0", "65", "x", "1.5"}) {
    std::string m = Error(Pod({Container("main", nullptr)},
                              {{"gpu-fraction", "0.5"}, {"gpu-fraction-num-devices", devices}}));
    EXPECT_THAT(m, HasSubstr("gpu-fraction-num-devices")) << devices;
  }
  for (const char* fraction : {"1.5", "0", "half", "1"}) {
    std::string m = Error(Pod({Container("main", nullptr)}, {{"gpu-fraction", fraction}}));
    EXPECT_THAT(m, HasSubstr("gpu-fraction")) << fraction;
  }
  for (const char* memory : {"0", "lots", "-5"}) {
    std::string m = Error(Pod({Container("main", nullptr)}, {{"gpu-memory", memory}}));
    EXPECT_THAT(m, HasSubstr("gpu-memory")) << memory;
  }
}

TEST(PodRequestTest, NotAnObject) {
  StatusOr<PodRequest> r = ParsePodRequest(json::array());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// ---- In words ----

ContainerRequest Req(GpuRequest request) { return {.container = "c", .request = request}; }

TEST(PodRequestTest, DescribeRequest) {
  EXPECT_EQ(DescribeRequest(Req(GpuRequest::Whole(2))), "gpufrac.io/gpu: 2");
  EXPECT_EQ(DescribeRequest(Req(GpuRequest::Memory(4 * kGiB))),
            "gpufrac.io/gpu: 1, gpufrac.io/gpu-memory: 4096 MiB");
  EXPECT_EQ(DescribeRequest(Req(GpuRequest::Memory(512 * kMiB, 2))),
            "gpufrac.io/gpu: 2, gpufrac.io/gpu-memory: 512 MiB");
  EXPECT_EQ(DescribeRequest(Req(GpuRequest::Fraction(250))),
            "gpufrac.io/gpu: 1, gpufrac.io/gpu-fraction: 250");
  EXPECT_EQ(DescribeRequest(Req(GpuRequest::Mig("2g.20gb"))),
            "gpufrac.io/gpu: 1, gpufrac.io/mig-profile: 2g.20gb");
  EXPECT_EQ(DescribeRequest(Req(GpuRequest::Fraction(250).OnModel("A100-80GB"))),
            "gpufrac.io/gpu: 1, gpufrac.io/gpu-fraction: 250, gpufrac.io/gpu-model: A100-80GB");
  GpuRequest compute = GpuRequest::Memory(4 * kGiB);
  compute.compute_milli = 300;
  compute.compute_limit_milli = 500;
  EXPECT_EQ(DescribeRequest(Req(compute)),
            "gpufrac.io/gpu: 1, gpufrac.io/gpu-memory: 4096 MiB, gpufrac.io/gpu-compute: 0.3, "
            "gpufrac.io/gpu-compute-limit: 0.5");
  ContainerRequest kai = Req(GpuRequest::Fraction(500, 2));
  kai.from_annotations = true;
  EXPECT_EQ(DescribeRequest(kai), "gpu-fraction: 0.5, gpu-fraction-num-devices: 2");
}

TEST(PodRequestTest, DescribeParsedRequests) {
  EXPECT_EQ(
      DescribeRequest(Only(Simple({{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "4096"}}))),
      "gpufrac.io/gpu: 1, gpufrac.io/gpu-memory: 4096 MiB");
  EXPECT_EQ(DescribeRequest(
                Only(Simple({{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", "3g.40gb"},
                                                        {"gpufrac.io/gpu-model", "H100-80GB"}}))),
            "gpufrac.io/gpu: 1, gpufrac.io/mig-profile: 3g.40gb, gpufrac.io/gpu-model: H100-80GB");
}

// ---- Containers that can remove their enforcement (issue 29) ----

json WithContext(json container, json context) {
  container["securityContext"] = std::move(context);
  return container;
}

json Fraction() { return {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", "250"}}; }

TEST(PodRequestTest, APrivilegedOrSysAdminContainerCanRemoveItsEnforcement) {
  struct Case {
    json context;
    std::string says;  // "" when the container cannot remove it.
  };
  const std::vector<Case> cases = {
      {json::object(), ""},
      {{{"privileged", true}}, "container \"main\" is privileged"},
      {{{"privileged", false}}, ""},
      {{{"capabilities", {{"add", {"SYS_ADMIN"}}}}},
       "container \"main\" adds capability SYS_ADMIN"},
      {{{"capabilities", {{"add", {"CHOWN", "CAP_SYS_ADMIN"}}}}},
       "container \"main\" adds capability CAP_SYS_ADMIN"},
      {{{"capabilities", {{"add", {"all"}}}}}, "container \"main\" adds capability all"},
      {{{"capabilities", {{"add", {"sys_admin"}}}}},
       "container \"main\" adds capability sys_admin"},
      // Pod Security baseline's capabilities reach no mount, device or other process.
      {{{"capabilities",
         {{"add",
           {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
            "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "cap_sys_chroot"}},
          {"drop", {"ALL"}}}}},
       ""},
      // Any other can: open_by_handle_at, modules, raw I/O, ptrace of a neighbour...
      {{{"capabilities", {{"add", {"CHOWN", "DAC_READ_SEARCH"}}}}},
       "container \"main\" adds capability DAC_READ_SEARCH"},
      {{{"capabilities", {{"add", {"CAP_SYS_MODULE"}}}}},
       "container \"main\" adds capability CAP_SYS_MODULE"},
      {{{"capabilities", {{"add", {"SYS_RAWIO"}}}}}, "adds capability SYS_RAWIO"},
      {{{"capabilities", {{"add", {"NET_ADMIN", "SYS_PTRACE"}}, {"drop", {"ALL"}}}}},
       "adds capability NET_ADMIN"},
      {{{"capabilities", {{"add", {"DAC_READ_SEARCH"}}}},
        {"allowPrivilegeEscalation", false},
        {"runAsUser", 1000}},
       ""},
      {{{"procMount", "Unmasked"}}, "container \"main\" sets securityContext.procMount Unmasked"},
      {{{"procMount", "Default"}}, ""},
      // Unconfined seccomp lets `unshare -Urm` bind a file over /etc/ld.so.preload; the
      // exception for capabilities does not cover it.
      {{{"seccompProfile", {{"type", "Unconfined"}}},
        {"allowPrivilegeEscalation", false},
        {"runAsUser", 1000}},
       "container \"main\" sets securityContext.seccompProfile Unconfined"},
      {{{"seccompProfile", {{"type", "RuntimeDefault"}}}}, ""},
      {{{"appArmorProfile", {{"type", "Unconfined"}}}},
       "container \"main\" sets securityContext.appArmorProfile Unconfined"},
      {{{"appArmorProfile", {{"type", "RuntimeDefault"}}}}, ""},
      // allowPrivilegeEscalation alone: the bounding set holds no SYS_ADMIN to escalate to.
      {{{"allowPrivilegeEscalation", true}}, ""},
      // SYS_ADMIN that a non-root process under no_new_privs can never gain.
      {{{"capabilities", {{"add", {"SYS_ADMIN"}}}},
        {"allowPrivilegeEscalation", false},
        {"runAsUser", 1000}},
       ""},
      {{{"capabilities", {{"add", {"SYS_ADMIN"}}}},
        {"allowPrivilegeEscalation", false},
        {"runAsNonRoot", true}},
       ""},
      // Root keeps it under no_new_privs; a non-root one with escalation can regain it (setuid).
      {{{"capabilities", {{"add", {"SYS_ADMIN"}}}},
        {"allowPrivilegeEscalation", false},
        {"runAsUser", 0}},
       "adds capability SYS_ADMIN"},
      {{{"capabilities", {{"add", {"SYS_ADMIN"}}}}, {"runAsUser", 1000}},
       "adds capability SYS_ADMIN"},
      {{{"capabilities", {{"add", {"SYS_ADMIN"}}}}, {"allowPrivilegeEscalation", false}},
       "adds capability SYS_ADMIN"},
  };
  for (const Case& c : cases) {
    StatusOr<PodRequest> r =
        ParsePodRequest(Pod({WithContext(Container("main", Fraction()), c.context)}));
    ASSERT_TRUE(r.ok()) << r.status();
    if (c.says.empty()) {
      EXPECT_EQ(r->unenforced, "") << c.context.dump();
    } else {
      EXPECT_THAT(r->unenforced, HasSubstr(c.says)) << c.context.dump();
    }
  }
}

TEST(PodRequestTest, ThePodsOwnFieldsCanRemoveItsEnforcementToo) {
  struct Case {
    std::function<void(json&)> change;
    std::string says;  // "" when the pod cannot remove it.
  };
  const std::vector<Case> cases = {
      {[](json&) {}, ""},
      {[](json& p) { p["spec"]["hostPID"] = true; }, "the pod sets spec.hostPID"},
      {[](json& p) { p["spec"]["hostPID"] = false; }, ""},
      {[](json& p) { p["spec"]["hostIPC"] = true; }, "the pod sets spec.hostIPC"},
      {[](json& p) {
         p["spec"]["volumes"] = {{{"name", "scratch"}, {"emptyDir", json::object()}},
                                 {{"name", "data"}, {"hostPath", {{"path", "/srv/data"}}}}};
       },
       "volume \"data\" of the pod is hostPath /srv/data"},
      {[](json& p) {
         p["spec"]["volumes"] = {{{"name", "scratch"}, {"emptyDir", json::object()}}};
       },
       ""},
      {[](json& p) {
         p["spec"]["securityContext"] = {{"seccompProfile", {{"type", "Unconfined"}}}};
       },
       "the pod sets securityContext.seccompProfile Unconfined (for container \"main\")"},
      // The container's own profile is the one that applies.
      {[](json& p) {
         p["spec"]["securityContext"] = {{"seccompProfile", {{"type", "Unconfined"}}},
                                         {"appArmorProfile", {{"type", "Unconfined"}}}};
         p["spec"]["containers"][0]["securityContext"] = {
             {"seccompProfile", {{"type", "RuntimeDefault"}}},
             {"appArmorProfile", {{"type", "RuntimeDefault"}}}};
       },
       ""},
      {[](json& p) {
         p["spec"]["securityContext"] = {{"appArmorProfile", {{"type", "Unconfined"}}}};
       },
       "the pod sets securityContext.appArmorProfile Unconfined (for container \"main\")"},
      {[](json& p) {
         p["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/main"] =
             "unconfined";
       },
       "the pod's annotation container.apparmor.security.beta.kubernetes.io/main is unconfined"},
      {[](json& p) {
         p["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/main"] =
             "runtime/default";
       },
       ""},
      // An ephemeral container, present when a pod is read after `kubectl debug`.
      {[](json& p) {
         p["spec"]["ephemeralContainers"] = {WithContext(
             Container("debug", nullptr), {{"capabilities", {{"add", {"SYS_PTRACE"}}}}})};
       },
       "ephemeral container \"debug\" adds capability SYS_PTRACE"},
  };
  for (const Case& c : cases) {
    json pod = Simple(Fraction());
    c.change(pod);
    StatusOr<PodRequest> r = ParsePodRequest(pod);
    ASSERT_TRUE(r.ok()) << r.status();
    if (c.says.empty()) {
      EXPECT_EQ(r->unenforced, "") << pod.dump();
    } else {
      EXPECT_EQ(r->unenforced, c.says) << pod.dump();
    }
  }
}

TEST(PodRequestTest, EveryContainerOfThePodCountsAndThePodsUserToo) {
  // A privileged init container runs with the pod's limit files in place.
  json pod = Simple(Fraction());
  pod["spec"]["initContainers"] = {
      WithContext(Container("setup", nullptr), {{"privileged", true}})};
  EXPECT_EQ(ParsePodRequest(pod)->unenforced, "init container \"setup\" is privileged");
  // A sidecar without GPUs that adds SYS_ADMIN.
  pod =
      Pod({Container("main", Fraction()),
           WithContext(Container("fuse", nullptr), {{"capabilities", {{"add", {"SYS_ADMIN"}}}}})});
  EXPECT_EQ(ParsePodRequest(pod)->unenforced, "container \"fuse\" adds capability SYS_ADMIN");
  // The pod's runAsUser with the container's no_new_privs: cannot gain it.
  pod = Pod({WithContext(Container("main", Fraction()), {{"capabilities", {{"add", {"SYS_ADMIN"}}}},
                                                         {"allowPrivilegeEscalation", false}})});
  pod["spec"]["securityContext"] = {{"runAsUser", 1000}};
  EXPECT_EQ(ParsePodRequest(pod)->unenforced, "");
  // The container's runAsUser 0 overrides the pod's.
  pod["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0;
  EXPECT_THAT(ParsePodRequest(pod)->unenforced, HasSubstr("adds capability SYS_ADMIN"));
  // A pod that asks for no GPU is not gpufrac's to judge.
  pod = Pod({WithContext(Container("main", {{"cpu", "1"}}), {{"privileged", true}})});
  EXPECT_EQ(ParsePodRequest(pod)->unenforced, "");
  EXPECT_EQ(UnenforcedReason(pod), "container \"main\" is privileged");
}

}  // namespace
}  // namespace gpufrac::k8s
