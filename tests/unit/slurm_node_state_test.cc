// The jobs' files on a Slurm node: one limit file and budget set per job shared by its steps,
// removed with the last step, at the epilog, or by a later step when a slurmstepd died
// (slurm/node_state.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "slurm/node_state.h"

namespace gpufrac::slurm {
namespace {

namespace fs = std::filesystem;
constexpr char kUuid[] = "GPU-12345678-1234-1234-1234-123456789abc";

class NodeStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpufrac-slurm-state-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    chmod(root_.c_str(), 0711);
    dir_ = root_ + "/state";
  }
  void TearDown() override {
    state_.reset();
    std::error_code ec;
    if (!budget_path_.empty()) fs::remove_all(budget_path_, ec);
    fs::remove_all(root_, ec);
  }

  NodeState& Open() {
    StatusOr<NodeState> opened = NodeState::Open(dir_);
    EXPECT_TRUE(opened.ok()) << opened.status().message();
    state_.emplace(std::move(*opened));
    budget_path_ = state_->budgets().path();
    return *state_;
  }
  std::string Limits(uint32_t job, uint64_t limit) {
    auto text = launch::LimitFileText(NodeState::WorkloadName(job), Gpus(limit),
                                      {.budget_dir = state_->budgets().path()});
    EXPECT_TRUE(text.ok()) << text.status().message();
    return *text;
  }
  static std::vector<launch::LimitedGpu> Gpus(uint64_t limit) {
    return {{.uuid = kUuid, .limit_bytes = limit, .context_bytes = 1 << 20}};
  }
  bool BudgetExists(uint32_t job) const {
    return fs::exists(budget_path_ + "/gpufrac." + NodeState::WorkloadName(job) + "." + kUuid);
  }
  // A process that has ended: what a SIGKILLed slurmstepd leaves in its marker.
  static proc::ProcessId DeadProcess() {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    proc::ProcessId id;
    proc::ReadProcessId(pid, &id);
    if (id.pid == 0) id = {pid, 1};
    waitpid(pid, nullptr, 0);
    return id;
  }

  std::string root_, dir_, budget_path_;
  std::optional<NodeState> state_;
};

TEST_F(NodeStateTest, StepsOfAJobShareOneLimitFileAndBudget) {
  NodeState& state = Open();
  const std::string text = Limits(7, 10ull << 30);
  auto first = state.BeginStep(7, 0, proc::CurrentProcess(), text, Gpus(10ull << 30), std::nullopt);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(*first, dir_ + "/job-7/limits");
  struct stat st {};
  ASSERT_EQ(stat(first->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  ASSERT_EQ(stat((dir_ + "/job-7").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  EXPECT_TRUE(BudgetExists(7));

  auto second =
      state.BeginStep(7, 1, proc::CurrentProcess(), text, Gpus(10ull << 30), std::nullopt);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(*second, *first);
  // Another limit for the same job's budget is refused, with the reason.
  auto other = state.BeginStep(7, 2, proc::CurrentProcess(), Limits(7, 5ull << 30),
                               Gpus(5ull << 30), std::nullopt);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("same"), std::string::npos);

  state.EndStep(7, 0);
  EXPECT_TRUE(fs::exists(*first));
  EXPECT_TRUE(BudgetExists(7));
  state.EndStep(7, 1);
  EXPECT_FALSE(fs::exists(dir_ + "/job-7"));
  EXPECT_FALSE(BudgetExists(7));
}

TEST_F(NodeStateTest, EpilogRemovesTheJobWhateverItsSteps) {
  NodeState& state = Open();
  ASSERT_TRUE(state
                  .BeginStep(8, 0, proc::CurrentProcess(), Limits(8, 1ull << 30), Gpus(1ull << 30),
                             std::nullopt)
                  .ok());
  state.EndJob(8);
  EXPECT_FALSE(fs::exists(dir_ + "/job-8"));
  EXPECT_FALSE(BudgetExists(8));
}

TEST_F(NodeStateTest, ANextStepRemovesWhatADeadStepdLeft) {
  NodeState& state = Open();
  ASSERT_TRUE(
      state.BeginStep(9, 0, DeadProcess(), Limits(9, 1ull << 30), Gpus(1ull << 30), std::nullopt)
          .ok());
  ASSERT_TRUE(state
                  .BeginStep(10, 0, proc::CurrentProcess(), Limits(10, 1ull << 30),
                             Gpus(1ull << 30), std::nullopt)
                  .ok());
  EXPECT_FALSE(fs::exists(dir_ + "/job-9"));
  EXPECT_FALSE(BudgetExists(9));
  EXPECT_TRUE(BudgetExists(10));
  state.EndStep(10, 0);
  EXPECT_FALSE(BudgetExists(10));
}

TEST_F(NodeStateTest, RefusesAStateDirOthersCanWrite) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0777), 0);
  chmod(dir_.c_str(), 0777);
  StatusOr<NodeState> opened = NodeState::Open(dir_);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("writable"), std::string::npos);
  EXPECT_FALSE(NodeState::Open("relative/dir").ok());
}

TEST_F(NodeStateTest, MakesTheStateDirAndItsParent) {
  dir_ = root_ + "/gpufrac/slurm";
  Open();
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  EXPECT_EQ(st.st_uid, geteuid());
}

}  // namespace
}  // namespace gpufrac::slurm
