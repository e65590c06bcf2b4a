// Helpers for the simulated-driver tests: every test runs its driver calls in a forked child with
// its own SIMGPU_NAMESPACE (the driver initialises once per process), and multi-process tests
// start further helper processes that talk to the test over pipes.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/nvml/nvml_exports.h"

namespace gpufrac::simgpu::testing {

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

#define ASSERT_CU(expr) ASSERT_EQ(::gpufrac::abi::CUDA_SUCCESS, (expr))
#define EXPECT_CU(expr) EXPECT_EQ(::gpufrac::abi::CUDA_SUCCESS, (expr))

// A fixture whose tests each get a fresh simulated machine, removed afterwards.
class SimGpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  using Env = std::map<std::string, std::optional<std::string>>;

  // Runs `body` in a forked child whose environment has SIMGPU_NAMESPACE = name_space(),
  // SIMGPU_CONFIG = `config`, no CUDA_VISIBLE_DEVICES or SIMGPU_DRIVER_VERSION, then `env`
  // (std::nullopt unsets). Fails the test if the child's assertions failed or it crashed.
  void RunInChild(const std::string& config, const Env& env, const std::function<void()>& body);
  void RunInChild(const std::string& config, const std::function<void()>& body) {
    RunInChild(config, Env{}, body);
  }

  const std::string& name_space() const { return name_space_; }

 private:
  std::string name_space_;
};

// A process started from a test child, connected by a pipe each way. Its body runs with the
// same environment, then the process exits normally (status 0 unless an assertion failed).
class Helper {
 public:
  explicit Helper(const std::function<void(Helper&)>& body);
  ~Helper();
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;

  // One-byte messages: from the helper's body to the test, or back.
  void Send(char message);
  char Receive();  // '\0' when the other side is gone

  pid_t pid() const { return pid_; }
  // Waits for the helper to end; its wait status.
  int Wait();

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  int write_fd_ = -1;
  bool waited_ = false;
};

// cuInit, then device `ordinal`'s primary context retained and made current.
abi::CUcontext InitAndUsePrimary(int ordinal = 0);

// Device memory in use on the current context's device, as cuMemGetInfo reports it.
std::uint64_t UsedBytes();

}  // namespace gpufrac::simgpu::testing
