// The test programs' one kernel: `spin`, which does nothing. On the simulated GPU a kernel's
// duration follows from its grid alone (simgpu/core/sim_time.h), so its body does not matter.
#pragma once

inline constexpr char kSpinPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry spin()
{
  ret;
}
)";
