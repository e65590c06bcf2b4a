// Child-process plumbing for the simulated-driver tests.
#include "simgpu_test_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "simgpu/core/shared_machine.h"

namespace gpufrac::simgpu::testing {
namespace {

constexpr unsigned int kChildTimeoutSeconds = 60;

// A normal exit, so the simulated driver returns the process's memory at once as a real one
// does (a killed process's memory is only reclaimed lazily; tests of that kill explicitly).
[[noreturn]] void ExitChild() {
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(::testing::Test::HasFailure() ? 1 : 0);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

}  // namespace

void SimGpuTest::SetUp() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  name_space_ = std::string("simgpu_test.") + info->name() + "." + std::to_string(::getpid());
}

void SimGpuTest::TearDown() { RemoveSharedMachine(name_space_); }

void SimGpuTest::RunInChild(const std::string& config, const Env& env,
                            const std::function<void()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(kChildTimeoutSeconds);
    ::setenv("SIMGPU_NAMESPACE", name_space_.c_str(), 1);
    ::setenv("SIMGPU_CONFIG", config.c_str(), 1);
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::unsetenv("SIMGPU_DRIVER_VERSION");
    for (const auto& [name, value] : env) {
      if (value.has_value()) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
    body();
    ExitChild();
  }
  int status = 0;
  ASSERT_EQ(pid, ::waitpid(pid, &status, 0));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "test child failed (" << Describe(status) << "); its output is above";
}

Helper::Helper(const std::function<void(Helper&)>& body) {
  int to_helper[2];
  int from_helper[2];
  if (::pipe(to_helper) != 0 || ::pipe(from_helper) != 0) {
    ADD_FAILURE() << "pipe failed";
    return;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(to_helper[1]);
    ::close(from_helper[0]);
    read_fd_ = to_helper[0];
    write_fd_ = from_helper[1];
    body(*this);
    ExitChild();
  }
  ::close(to_helper[0]);
  ::close(from_helper[1]);
  read_fd_ = from_helper[0];
  write_fd_ = to_helper[1];
}

Helper::~Helper() {
  ::close(read_fd_);
  ::close(write_fd_);
  if (pid_ > 0 && !waited_) {
    ::kill(pid_, SIGKILL);
    Wait();
  }
}

void Helper::Send(char message) { ASSERT_EQ(1, ::write(write_fd_, &message, 1)); }

char Helper::Receive() {
  char message = '\0';
  return ::read(read_fd_, &message, 1) == 1 ? message : '\0';
}

int Helper::Wait() {
  int status = 0;
  ::waitpid(pid_, &status, 0);
  waited_ = true;
  return status;
}

abi::CUcontext InitAndUsePrimary(int ordinal) {
  abi::CUcontext context = nullptr;
  EXPECT_CU(cuInit(0));
  abi::CUdevice device = 0;
  EXPECT_CU(cuDeviceGet(&device, ordinal));
  EXPECT_CU(cuDevicePrimaryCtxRetain(&context, device));
  EXPECT_CU(cuCtxSetCurrent(context));
  return context;
}

std::uint64_t UsedBytes() {
  size_t free = 0;
  size_t total = 0;
  EXPECT_CU(cuMemGetInfo_v2(&free, &total));
  return total - free;
}

}  // namespace gpufrac::simgpu::testing
