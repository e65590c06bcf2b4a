// Where gpufrac's own files are: the programs and libraries installed next to the running
// executable, and a short tag that tells state directories apart.
#pragma once

#include <string>

namespace gpufrac {

// The directory of the running executable (from /proc/self/exe).
std::string ExecutableDir();
// libgpufrac.so: $GPUFRAC_LIBRARY, else ../lib/libgpufrac.so next to the executable.
std::string LimiterLibraryPath();
// The simulated driver's libraries: $GPUFRAC_SIMGPU_DIR, else ../lib/simgpu next to the
// executable.
std::string SimgpuDir();
// A program installed next to the running executable (gpufracd, gpufrac-shim, gpufrac).
std::string SiblingProgram(const std::string& name);

// A short tag that tells one state directory's service apart from another's on the same machine
// (8 hex digits of a hash of the path): names its workloads' budgets and its simulated machine.
std::string StateDirTag(const std::string& state_dir);

}  // namespace gpufrac
