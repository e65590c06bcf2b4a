// A thread that feeds a shared GPU must run again as soon as what it waits for happens, even on
// a busy CPU.
//
// When a waiter's turn comes or a holder's work runs low, every moment until its thread runs
// again is GPU time nobody uses. Beside CPU-bound neighbours, Linux's fair scheduler lets a woken
// thread wait for the running one's slice to end: beside two busy loops per core, with every
// process in one scheduling group (no autogroup, or a container's cgroup), the GPU idled 15-17%
// of the time. Since Linux 6.12 (EEVDF) a thread may ask for a shorter slice
// (sched_attr.sched_runtime, 0.1 to 100 ms, no privilege needed): it keeps its weight, so its
// share of the CPU is unchanged, but when it wakes it preempts a running thread with a longer
// slice (and is itself preempted after 0.1 ms when others wait). Older kernels ignore the field.
#pragma once

namespace gpufrac::limiter {

// Asks, once per thread, for the shortest slice (0.1 ms); only the slice changes (the thread's
// nice value stays). Nothing for a thread of another policy than SCHED_OTHER (real-time, batch,
// idle), or where the kernel refuses. A thread-local flag test after the first call.
void WakePromptly();

}  // namespace gpufrac::limiter
