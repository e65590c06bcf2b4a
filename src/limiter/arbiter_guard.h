// Keeps a process alive when another workload truncates a compute arbiter it has mapped.
//
// Every workload on a shared GPU can write the GPU's arbiter segment (compute_arbiter.h): that is
// how they take turns. One that truncates the file would make every other process's next access
// to its mapping raise SIGBUS, which kills a process by default. The guard catches that fault for
// the registered segments only: it puts a private segment of the same size in place of the lost
// mapping, set so that this process holds the turn for good, and says so once on stderr; the
// process goes on without taking turns (as the GPU shares time without gpufrac), which is the
// most a hostile member can take from the others anyway. A SIGBUS anywhere else goes to the
// handler that was there before (or kills the process, as without the guard).
//
// Limits: a program that installs its own SIGBUS handler after the limiter's attaches replaces
// the guard.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufrac::limiter {

struct ArbiterSegment;

// Guards `segment` (mapped shared, sizeof(ArbiterSegment) bytes) from the moment it is mapped,
// before anything reads it; installs the SIGBUS handler on first use. Until SetGuardedSlot, a
// lost segment is replaced by an empty arbiter (which the process then joins alone). At most 16
// segments per process; false when there is no room or the handler cannot be installed (nothing
// changes).
bool GuardArbiter(ArbiterSegment* segment);
// This process's workload joined `segment` (guarded) in slot `slot`: a lost segment is replaced
// by one in which it holds the turn for good.
void SetGuardedSlot(ArbiterSegment* segment, int slot);
// Stops guarding `segment`, before it is unmapped.
void UnguardArbiter(ArbiterSegment* segment);

}  // namespace gpufrac::limiter
