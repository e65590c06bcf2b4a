// The shared request grammar: each kind parses to the right request, prints back to flags that
// parse to the same request, and every mistake is one line naming the flag.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "common/gpu_request.h"

namespace gpufrac {
namespace {

GpuRequest Parse(GpuRequestText t) {
  StatusOr<GpuRequest> r = ParseGpuRequest(t);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : GpuRequest{};
}

std::string Error(GpuRequestText t) {
  StatusOr<GpuRequest> r = ParseGpuRequest(t);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  return r.ok() ? "" : r.status().message();
}

TEST(GpuRequest, ParsesEachKind) {
  GpuRequest memory = Parse({.gpu_memory = "4G", .gpu_model = "A100-80GB"});
  EXPECT_EQ(memory.kind, GpuRequest::Kind::kMemory);
  EXPECT_EQ(memory.memory_bytes, uint64_t{4} << 30);
  EXPECT_EQ(memory.gpu_model, "A100-80GB");
  GpuRequest share = Parse({.gpu_fraction = "25%"});
  EXPECT_EQ(share.kind, GpuRequest::Kind::kFraction);
  EXPECT_EQ(share.fraction_milli, 250u);
  GpuRequest whole = Parse({.gpus = "2"});
  EXPECT_EQ(whole.kind, GpuRequest::Kind::kWholeGpus);
  EXPECT_EQ(whole.gpus, 2u);
  GpuRequest mig = Parse({.mig_profile = "2G.20GB"});
  EXPECT_EQ(mig.kind, GpuRequest::Kind::kMigProfile);
  EXPECT_EQ(mig.mig_profile, "2g.20gb");
  EXPECT_EQ(Parse({.mig_profile = "1g.10gb+me"}).mig_profile, "1g.10gb+me");
}

TEST(GpuRequest, PrintsFlagsThatParseBackToTheSameRequest) {
  for (GpuRequestText t : std::vector<GpuRequestText>{{.gpu_memory = "4G"},
                                                      {.gpu_memory = "1.5GiB"},
                                                      {.gpu_memory = "1000001"},
                                                      {.gpu_fraction = "0.125"},
                                                      {.gpus = "8", .gpu_model = "H100-80GB"},
                                                      {.mig_profile = "3g.40gb"}}) {
    GpuRequest r = Parse(t);
    std::string flags = FormatGpuRequest(r);
    // Split "--flag value --flag value" back into the text form.
    GpuRequestText back;
    std::istringstream in(flags);
    for (std::string flag, value; in >> flag >> value;) {
      if (flag == "--gpu-memory") back.gpu_memory = value;
      if (flag == "--gpu-fraction") back.gpu_fraction = value;
      if (flag == "--gpus") back.gpus = value;
      if (flag == "--mig-profile") back.mig_profile = value;
      if (flag == "--gpu-model") back.gpu_model = value;
    }
    EXPECT_EQ(Parse(back), r) << flags;
  }
  EXPECT_EQ(FormatGpuRequest(Parse({.gpu_memory = "4G"})), "--gpu-memory 4GiB");
}

TEST(GpuRequest, MistakesAreOneLineNamingTheFlag) {
  EXPECT_NE(Error({}).find("give exactly one of"), std::string::npos);
  EXPECT_NE(Error({.gpu_memory = "4G", .gpus = "1"}).find("exactly one"), std::string::npos);
  EXPECT_EQ(Error({.gpu_fraction = "1"}), "--gpu-fraction 1 is a whole GPU; write --gpus 1");
  EXPECT_EQ(Error({.gpu_fraction = "0"}).rfind("--gpu-fraction: ", 0), 0u);
  EXPECT_EQ(Error({.gpu_memory = "-4G"}).rfind("--gpu-memory: ", 0), 0u);
  for (const char* bad : {"0", "-1", "1.5", "65", "two", ""}) {
    if (*bad == 0) continue;
    EXPECT_EQ(Error({.gpus = bad}).rfind("--gpus is", 0), 0u) << bad;
  }
  for (const char* bad : {"2g", "9g.10gb", "2g.0gb", "g.10gb", "2g.10", "2g.10gb+xx"}) {
    EXPECT_EQ(Error({.mig_profile = bad}).rfind("--mig-profile is", 0), 0u) << bad;
  }
  EXPECT_EQ(Error({.gpus = "1", .gpu_model = "A100 80GB"}).rfind("--gpu-model is", 0), 0u);
}

}  // namespace
}  // namespace gpufrac
