// Simulated driver: one machine shared by many processes. Memory held by one process is seen by
// all, and is returned when the process exits, is killed, or its pid is reused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/catalogue.h"
#include "proc/process_identity.h"
#include "simgpu/core/config.h"
#include "simgpu/core/memory_ledger.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

const std::uint64_t kT4Context = gpu::FindModel("T4")->context_bytes;
const std::uint64_t kT4Memory = gpu::FindModel("T4")->memory_bytes;

// A helper process that allocates `bytes` on device 0, reports 'R', and frees and exits when
// told 'Q'.
void AllocateAndHold(Helper& self, std::uint64_t bytes) {
  InitAndUsePrimary();
  abi::CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAlloc_v2(&pointer, bytes));
  self.Send('R');
  if (self.Receive() == 'Q') {
    EXPECT_CU(cuMemFree_v2(pointer));
  }
}

using SimGpuProcessTest = SimGpuTest;

TEST_F(SimGpuProcessTest, MemoryIsSharedAcrossProcesses) {
  RunInChild("1xT4", [] {
    InitAndUsePrimary();
    EXPECT_EQ(kT4Context, UsedBytes());
    {
      Helper other([](Helper& self) { AllocateAndHold(self, 5 * kGiB); });
      ASSERT_EQ('R', other.Receive());
      EXPECT_EQ(2 * kT4Context + 5 * kGiB, UsedBytes());

      ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
      abi::nvmlDevice_t device = nullptr;
      ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &device));
      abi::nvmlMemory_t memory{};
      ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetMemoryInfo(device, &memory));
      EXPECT_EQ(2 * kT4Context + 5 * kGiB, memory.used);

      // What the other process holds limits what this one can take.
      abi::CUdeviceptr pointer = 0;
      EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY,
                cuMemAlloc_v2(&pointer, kT4Memory - 2 * kT4Context - 5 * kGiB + 1));
      other.Send('Q');
      const int status = other.Wait();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    // Its context went when it exited.
    EXPECT_EQ(kT4Context, UsedBytes());
  });
}

TEST_F(SimGpuProcessTest, ExitReturnsEverythingAProcessHeld) {
  RunInChild("1xT4", [] {
    InitAndUsePrimary();
    Helper leaker([](Helper& self) {
      InitAndUsePrimary();
      abi::CUdeviceptr pointer = 0;
      ASSERT_CU(cuMemAlloc_v2(&pointer, 3 * kGiB));  // never freed
      self.Send('R');
    });
    ASSERT_EQ('R', leaker.Receive());
    leaker.Wait();
    EXPECT_EQ(kT4Context, UsedBytes());
  });
}

TEST_F(SimGpuProcessTest, KilledProcessMemoryIsReclaimed) {
  RunInChild("1xT4", [] {
    InitAndUsePrimary();
    Helper victim([](Helper& self) { AllocateAndHold(self, 12 * kGiB); });
    ASSERT_EQ('R', victim.Receive());
    abi::CUdeviceptr pointer = 0;
    EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc_v2(&pointer, 4 * kGiB));

    ASSERT_EQ(0, ::kill(victim.pid(), SIGKILL));
    // Not reaped yet: a zombie holds no GPU memory. The out-of-memory path reclaims it.
    proc::ProcessId seen;
    for (int i = 0; i < 1000 && proc::ReadProcessId(victim.pid(), &seen); ++i) {
      ::usleep(1000);
    }
    ASSERT_CU(cuMemAlloc_v2(&pointer, 4 * kGiB));
    EXPECT_EQ(kT4Context + 4 * kGiB, UsedBytes());
    victim.Wait();

    // A process that attaches later sees only the memory of the living.
    Helper observer([](Helper& self) {
      InitAndUsePrimary();
      EXPECT_EQ(2 * kT4Context + 4 * kGiB, UsedBytes());
      self.Send('D');
    });
    EXPECT_EQ('D', observer.Receive());
    EXPECT_EQ(0, observer.Wait());
    EXPECT_CU(cuMemFree_v2(pointer));
  });
}

TEST_F(SimGpuProcessTest, AttachReclaimsKilledProcesses) {
  RunInChild("1xT4", [] {
    {
      Helper victim([](Helper& self) { AllocateAndHold(self, 6 * kGiB); });
      ASSERT_EQ('R', victim.Receive());
      ::kill(victim.pid(), SIGKILL);
      victim.Wait();
    }
    // Nothing has run out of memory yet; attaching is enough to clean up.
    InitAndUsePrimary();
    EXPECT_EQ(kT4Context, UsedBytes());
  });
}

TEST_F(SimGpuProcessTest, ReusedPidDoesNotKeepMemory) {
  const std::string ns = name_space();
  RunInChild("1xT4", [ns] {
    MachineConfig config;
    std::string error;
    ASSERT_TRUE(ParseMachineConfig("1xT4", &config, &error)) << error;
    SharedMachine* machine = AttachSharedMachine(ns, config, &error);
    ASSERT_NE(nullptr, machine) << error;

    // A slot left by an earlier process that had this pid: same pid, other start time.
    const proc::ProcessId self = proc::CurrentProcess();
    EXPECT_TRUE(proc::IsRunning(self));
    proc::ProcessId earlier = self;
    earlier.start_ticks = self.start_ticks > 10 ? self.start_ticks - 10 : self.start_ticks + 10;
    EXPECT_FALSE(proc::IsRunning(earlier));
    ProcessSlot* slot = ClaimSlot(*machine, earlier);
    ASSERT_NE(nullptr, slot);
    ASSERT_TRUE(Charge(*machine, *slot, 0, 7 * kGiB));
    EXPECT_EQ(7 * kGiB, simgpu::UsedBytes(*machine, 0));

    EXPECT_EQ(1, ReclaimDeadProcesses(*machine, /*self_is_stale=*/false));
    EXPECT_EQ(0u, simgpu::UsedBytes(*machine, 0));
    proc::ProcessId none;
    EXPECT_FALSE(proc::ReadProcessId(-1, &none));
  });
}

TEST_F(SimGpuProcessTest, ForkedChildStartsWithoutTheParentsDriver) {
  RunInChild("1xT4", [] {
    InitAndUsePrimary();
    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAlloc_v2(&pointer, kGiB));
    Helper child([](Helper& self) {
      int count = 0;
      EXPECT_EQ(abi::CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&count));
      abi::CUcontext current = nullptr;
      EXPECT_EQ(abi::CUDA_ERROR_NOT_INITIALIZED, cuCtxGetCurrent(&current));
      InitAndUsePrimary();
      EXPECT_EQ(2 * kT4Context + kGiB, UsedBytes());
      self.Send('D');
    });
    EXPECT_EQ('D', child.Receive());
    EXPECT_EQ(0, child.Wait());
    EXPECT_EQ(kT4Context + kGiB, UsedBytes());
    EXPECT_CU(cuMemFree_v2(pointer));
  });
}

TEST_F(SimGpuProcessTest, NamespacesAreIndependent) {
  const std::string other_ns = name_space() + ".other";
  RunInChild("1xT4", [other_ns] {
    InitAndUsePrimary();
    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAlloc_v2(&pointer, 8 * kGiB));
    ::setenv("SIMGPU_NAMESPACE", other_ns.c_str(), 1);
    Helper elsewhere([](Helper& self) {
      InitAndUsePrimary();
      EXPECT_EQ(kT4Context, UsedBytes());
      self.Send('D');
    });
    EXPECT_EQ('D', elsewhere.Receive());
    EXPECT_EQ(0, elsewhere.Wait());
  });
  EXPECT_TRUE(RemoveSharedMachine(other_ns));
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
