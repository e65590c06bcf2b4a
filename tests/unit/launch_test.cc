// The one launch path every launcher shares: the workload's environment, its limit file (and the
// writer that never follows a link or leaves a half-written file), and its budgets.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launch/budgets.h"
#include "launch/environment.h"
#include "launch/limit_file.h"
#include "limiter/budget.h"
#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

namespace fs = std::filesystem;

constexpr char kUuid0[] = "GPU-0b6e6d0e-1111-2222-3333-444455556666";
constexpr char kUuid1[] = "GPU-0b6e6d0e-1111-2222-3333-444455557777";
constexpr uint64_t kGiB = uint64_t{1} << 30;

std::vector<std::string> Named(const std::vector<std::string>& env, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& e : env) {
    if (e.rfind(name + "=", 0) == 0) out.push_back(e.substr(name.size() + 1));
  }
  return out;
}

TEST(WorkloadEnvironmentTest, TheLimiterComesFirstAndNoDuplicateShadowsAVariable) {
  std::vector<std::string> env = WithWorkloadEnvironment(
      {"PATH=/bin", "LD_PRELOAD=/home/u/mine.so", "CUDA_VISIBLE_DEVICES=0,1,2",
       "CUDA_VISIBLE_DEVICES=3", "GPUFRAC_LIMIT_FILE=/tmp/forged"},
      {.limiter_path = "/opt/gpufrac/lib/libgpufrac.so",
       .limit_file = "/run/job/limits",
       .visible_uuids = {kUuid0, kUuid1},
       .extra = {"SIMGPU_NAMESPACE=x", "CUDA_VISIBLE_DEVICES=" + std::string(kUuid1)}});
  EXPECT_EQ(Named(env, "LD_PRELOAD"),
            std::vector<std::string>{"/opt/gpufrac/lib/libgpufrac.so:/home/u/mine.so"});
  EXPECT_EQ(Named(env, "GPUFRAC_LIMIT_FILE"), std::vector<std::string>{"/run/job/limits"});
  // Extras are set last and win.
  EXPECT_EQ(Named(env, "CUDA_VISIBLE_DEVICES"), std::vector<std::string>{kUuid1});
  EXPECT_EQ(Named(env, "SIMGPU_NAMESPACE"), std::vector<std::string>{"x"});
  EXPECT_EQ(Named(env, "PATH"), std::vector<std::string>{"/bin"});

  std::vector<std::string> bare = WithWorkloadEnvironment(
      {}, {.limiter_path = "/l.so", .limit_file = "/f", .visible_uuids = {kUuid0}, .extra = {}});
  EXPECT_EQ(Named(bare, "LD_PRELOAD"), std::vector<std::string>{"/l.so"});
  EXPECT_EQ(Named(bare, "CUDA_VISIBLE_DEVICES"), std::vector<std::string>{kUuid0});
}

TEST(LimitFileTest, TheTextIsWhatTheLimiterReadsAndBadGpusAreRefused) {
  StatusOr<std::string> text = LimitFileText(
      "job-1", {{kUuid0, 4 * kGiB, 783u << 20}, {kUuid1, 2 * kGiB, 783u << 20}}, true);
  ASSERT_TRUE(text.ok()) << text.status();
  limiter::LimitConfig parsed;
  char err[256];
  ASSERT_TRUE(limiter::ParseLimitConfig(text->data(), text->size(), &parsed, err, sizeof(err)))
      << err;
  EXPECT_EQ(parsed.gpu_count, 2);
  EXPECT_EQ(parsed.gpus[1].limit_bytes, 2 * kGiB);
  EXPECT_TRUE(parsed.quiet);

  auto refused = [](const std::string& workload, std::vector<LimitedGpu> gpus) {
    StatusOr<std::string> t = LimitFileText(workload, gpus);
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << workload;
    return t.status().message();
  };
  EXPECT_NE(refused("job 1", {{kUuid0, kGiB, 0}}).find("workload name"), std::string::npos);
  EXPECT_NE(refused("job-1", {{kUuid0, kGiB, 0}, {kUuid0, kGiB, 0}}).find("listed twice"),
            std::string::npos);
  EXPECT_NE(refused("job-1", {{"GPU-0/../x", kGiB, 0}}).find("not a GPU UUID"), std::string::npos);
  EXPECT_NE(refused("job-1", {{kUuid0, 0, 0}}).find("between 1 byte"), std::string::npos);
  EXPECT_NE(refused("job-1", {}).find("1 to"), std::string::npos);
}

class WriteNewFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpufrac-launch-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(WriteNewFileTest, WritesExactlyTheModeWhateverTheUmask) {
  mode_t old = umask(0777);
  Status written = WriteNewFile(dir_ / "limits", "text\n", 0444);
  umask(old);
  ASSERT_TRUE(written.ok()) << written;
  struct stat st;
  ASSERT_EQ(stat((dir_ / "limits").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  std::ifstream in(dir_ / "limits");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "text");
}

// An attacker who can put a name where the file goes gets neither their file rewritten nor the
// file a link points to.
TEST_F(WriteNewFileTest, NeverWritesThroughALinkOrIntoAFileThatExists) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep";
  fs::create_symlink(victim, dir_ / "link");
  EXPECT_FALSE(WriteNewFile(dir_ / "link", "evil", 0644).ok());
  EXPECT_FALSE(WriteNewFile(victim, "evil", 0644).ok());
  std::ifstream in(victim);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "keep");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));  // Not removed either: it is not ours.
}

TEST_F(WriteNewFileTest, AFailedWriteLeavesNothingBehind) {
  const fs::path path = dir_ / "spec.json";
  pid_t child = fork();
  if (child == 0) {
    // Files of more than 4 bytes cannot be written: the write fails part-way.
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {4, 4};
    setrlimit(RLIMIT_FSIZE, &small);
    Status written = WriteNewFile(path, std::string(4096, 'x'), 0600);
    _exit(!written.ok() && written.message().find("cannot write") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(path));
}

bool BudgetExists(const std::string& workload, const std::string& uuid) {
  char name[160];
  uint64_t used = 0;
  return limiter::BudgetName(workload.c_str(), uuid.c_str(), name, sizeof(name)) &&
         limiter::Budget::PeekUsed(name, &used);
}

TEST(WorkloadBudgetsTest, CreatedAllOrNothingAndRemovedUnlessKept) {
  const std::string workload = "launch-test-" + std::to_string(getpid());
  {
    StatusOr<WorkloadBudgets> budgets =
        WorkloadBudgets::Create(workload, {{kUuid0, kGiB, 0}, {kUuid1, kGiB, 0}}, std::nullopt);
    ASSERT_TRUE(budgets.ok()) << budgets.status();
    EXPECT_TRUE(BudgetExists(workload, kUuid0));
    EXPECT_TRUE(BudgetExists(workload, kUuid1));
    EXPECT_EQ(WorkloadBudgets::MemoryInUse(workload, kUuid0), 0u);
  }
  EXPECT_FALSE(BudgetExists(workload, kUuid0));  // Gone with the object.
  EXPECT_FALSE(BudgetExists(workload, kUuid1));

  // The second GPU's limit is refused: the first GPU's budget does not stay.
  StatusOr<WorkloadBudgets> half =
      WorkloadBudgets::Create(workload, {{kUuid0, kGiB, 0}, {kUuid1, 0, 0}}, std::nullopt);
  EXPECT_FALSE(half.ok());
  EXPECT_FALSE(BudgetExists(workload, kUuid0));

  // Kept budgets outlive the object until Remove.
  {
    StatusOr<WorkloadBudgets> kept =
        WorkloadBudgets::Create(workload, {{kUuid0, kGiB, 0}}, std::nullopt);
    ASSERT_TRUE(kept.ok()) << kept.status();
    kept->Keep();
  }
  EXPECT_TRUE(BudgetExists(workload, kUuid0));
  WorkloadBudgets::Remove(workload, {kUuid0, kUuid1});
  EXPECT_FALSE(BudgetExists(workload, kUuid0));
  EXPECT_EQ(WorkloadBudgets::MemoryInUse(workload, kUuid0), 0u);
}

}  // namespace
}  // namespace gpufrac::launch
