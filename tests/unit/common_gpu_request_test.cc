// The shared request grammar: each kind parses to the right request, prints back to flags that
// parse to the same request, and every mistake is one line naming the flag.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string_view>
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
                                                      {.mig_profile = "3g.40gb"},
                                                      {.gpu_memory = "20G", .gpu_compute = "0.3"},
                                                      {.gpu_fraction = "0.25",
                                                       .gpu_compute = "10%",
                                                       .gpu_compute_limit = "0.5"},
                                                      {.gpu_memory = "8G",
                                                       .gpu_compute_limit = "1"}}) {
    GpuRequest r = Parse(t);
    std::string flags = FormatGpuRequest(r);
    // Split "--flag value --flag value" back into the text form.
    GpuRequestText back;
    std::istringstream in(flags);
    for (std::string flag, value; in >> flag >> value;) {
      const GpuRequestField* field = FindGpuRequestField(flag.substr(2));
      ASSERT_NE(field, nullptr) << flag;
      back.*field->text = value;
    }
    EXPECT_EQ(Parse(back), r) << flags;
  }
  EXPECT_EQ(FormatGpuRequest(Parse({.gpu_memory = "4G"})), "--gpu-memory 4GiB");
}

TEST(GpuRequest, NamedConstructorsMakeWhatTheGrammarParses) {
  EXPECT_EQ(Parse({.gpu_memory = "4G"}), GpuRequest::Memory(uint64_t{4} << 30));
  EXPECT_EQ(Parse({.gpu_fraction = "0.25", .gpu_model = "A30-24GB"}),
            GpuRequest::Fraction(250).OnModel("A30-24GB"));
  EXPECT_EQ(Parse({.gpus = "3"}), GpuRequest::Whole(3));
  EXPECT_EQ(Parse({.mig_profile = "1g.10gb"}), GpuRequest::Mig("1g.10gb"));
  // One GPU unless asked for more.
  EXPECT_EQ(Parse({.gpu_memory = "1G"}).gpus, 1u);
  EXPECT_EQ(GpuRequest::Fraction(500, 4).gpus, 4u);
}

TEST(GpuRequest, OneTableNamesEveryField) {
  std::set<std::string_view> names;
  GpuRequestText all;
  std::set<const std::string*> members;  // Where each field's text goes.
  for (const GpuRequestField& field : GpuRequestFields()) {
    EXPECT_TRUE(names.insert(field.name).second) << field.name;
    EXPECT_TRUE(members.insert(&(all.*field.text)).second) << field.name;
    EXPECT_EQ(FindGpuRequestField(field.name), &field);
    EXPECT_FALSE(field.help.empty());
    // Each field alone is a non-empty text, and one given field names itself when it is wrong.
    GpuRequestText t;
    t.*field.text = "?bad?";
    EXPECT_FALSE(t.empty());
    if (field.amount) {
      EXPECT_EQ(Error(t).rfind("--" + std::string(field.name), 0), 0u) << field.name;
    }
  }
  // Every member of GpuRequestText (all strings) has its row.
  EXPECT_EQ(members.size() * sizeof(std::string), sizeof(GpuRequestText));
  EXPECT_TRUE(GpuRequestText{}.empty());
  EXPECT_EQ(FindGpuRequestField("gpu-mem"), nullptr);
  EXPECT_EQ(GpuRequestFieldNames(),
            "gpu-memory, gpu-fraction, gpus, mig-profile, gpu-model, gpu-compute, "
            "gpu-compute-limit");
  EXPECT_EQ(Error({}),
            "give exactly one of --gpu-memory SIZE, --gpu-fraction F, --gpus N or --mig-profile "
            "NAME");
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

TEST(GpuRequest, AComputeShareQualifiesASharedGpuOnly) {
  GpuRequest r = Parse({.gpu_memory = "20G", .gpu_compute = "0.3", .gpu_compute_limit = "70%"});
  EXPECT_EQ(r.compute_milli, 300u);
  EXPECT_EQ(r.compute_limit_milli, 700u);
  EXPECT_EQ(FormatGpuRequest(r), "--gpu-memory 20GiB --gpu-compute 0.3 --gpu-compute-limit 0.7");
  // Not given: 0, which the node reads as "the memory share" and "its default limit".
  EXPECT_EQ(Parse({.gpu_fraction = "0.5"}).compute_milli, std::nullopt);
  EXPECT_EQ(Parse({.gpu_fraction = "0.5", .gpu_compute_limit = "1"}).compute_limit_milli, 1000u);

  EXPECT_EQ(Error({.gpus = "2", .gpu_compute = "0.5"}),
            "--gpu-compute is for a share of a GPU (--gpu-memory or --gpu-fraction); whole GPUs "
            "have all of their compute");
  EXPECT_EQ(Error({.mig_profile = "1g.10gb", .gpu_compute_limit = "0.5"})
                .rfind("--gpu-compute-limit is for a share of a GPU", 0),
            0u);
  EXPECT_EQ(Error({.gpu_memory = "4G", .gpu_compute = "0.5", .gpu_compute_limit = "0.25"}),
            "--gpu-compute-limit 0.25 is below --gpu-compute 0.5; the limit is the most it may "
            "take, at least what it is guaranteed");
  EXPECT_EQ(Error({.gpu_memory = "4G", .gpu_compute = "1"}),
            "--gpu-compute 1 guarantees all of the GPU's time: that is a whole GPU; write --gpus "
            "1");
  for (const char* bad : {"0", "-0.1", "1.5", "x", "0.0001"}) {
    EXPECT_EQ(Error({.gpu_memory = "4G", .gpu_compute = bad}).rfind("--gpu-compute: ", 0), 0u)
        << bad;
    EXPECT_EQ(Error({.gpu_memory = "4G", .gpu_compute_limit = bad})
                  .rfind("--gpu-compute-limit: ", 0),
              0u)
        << bad;
  }
}

}  // namespace
}  // namespace gpufrac
