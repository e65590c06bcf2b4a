// The compute engines of the simulated GPUs, shared by every process of a namespace. As on an
// NVIDIA GPU without MPS, work of different contexts never runs at the same time: the engine
// alternates round-robin between the contexts that have work, in time slices
// (SharedMachine::timeslice_ns); a context whose work runs out yields at once, and a kernel
// longer than a slice is preempted at the slice's end. A GPU is one engine; in MIG mode each
// compute instance is one (its SMs are its own).
//
// Each context (a client) has a virtual clock, `served`, that advances only while it holds the
// engine; its streams queue work in that clock (stream.h), and the context has work while
// `served` < `pending`. The engine is advanced lazily to "now" by whichever process touches it,
// under the device's robust process-shared mutex. With one busy context the clock runs at the
// speed of real time, so a single process sees exactly the timings of an uncontended GPU.
//
// MPS: the clients of one MPS server (contexts with the same `group`) are one context to the
// time-slice scheduler, as the server's shared context is on a GPU. While their group holds the
// engine they all run at once, each on its share of the SMs (its kernels' durations already
// follow from the SMs it may use, sim_time.h). When the shares of the clients with work add up
// to S > 1 the SMs are oversubscribed and each of them runs at 1/S of its speed: every client
// gets the fraction share/S of the engine, in proportion to what it asked for.
//
// Engine time (ground truth) is weighted by the share of the SMs used: a context of its own
// receives 1 ns per ns it holds the engine, an MPS client share/max(1, S) per ns its group holds
// it; an engine's busy time is the sum over its clients, so it never exceeds real time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "simgpu/core/shared_machine.h"

namespace gpufrac::simgpu {

// Initialises every device's engine mutex (the machine's creator calls this once).
void InitialiseEngines(SharedMachine& machine);

// Where a context sits: its device's engine table and its client entry there.
struct EngineSeat {
  int device = -1;
  int client = -1;
  bool valid() const { return client >= 0; }
};

// The engine a context runs on: the whole GPU (gpu_instance = -1), or a MIG compute instance
// of a GPU instance of the given generation.
struct EngineKey {
  int device = 0;
  int gpu_instance = -1;
  int compute_instance = -1;
  std::uint64_t generation = 0;
  // MPS: the server whose group the context joins (0: a context of its own) and the share of
  // the engine's SMs its kernels may use, in millionths.
  std::uint64_t group = 0;
  std::uint32_t share_ppm = kWholeEnginePpm;
};

// Joins the engine named by `key` as a new client owned by process slot `slot_index`, with no
// work; its clock starts at the current time (so clocks of a context that leaves and joins again
// never go back). false when the device's client or engine entries are all taken.
bool JoinEngine(SharedMachine& machine, const EngineKey& key, int slot_index, EngineSeat* seat);

// Leaves the engine: queued work is dropped (as when the driver tears a context down) and the
// client's event watches are freed.
void LeaveEngine(SharedMachine& machine, const EngineSeat& seat);

// Holds a device's engine mutex, with the seat's engine simulated up to now. The seat must be
// valid; the calls below that take a seat accept an invalid one (a context that left) as done.
class EngineSession {
 public:
  EngineSession(SharedMachine& machine, const EngineSeat& seat);
  ~EngineSession();
  EngineSession(const EngineSession&) = delete;
  EngineSession& operator=(const EngineSession&) = delete;

  std::uint64_t now() const { return now_; }
  // The client's clock now.
  std::uint64_t Served() const;
  // The client's queued work lasts until `until` on its clock (never shortens it).
  void AddWork(std::uint64_t until);
  // Arms watch `watch` (from AllocateWatch) to note the real time at which the client's clock
  // reaches `target`; one already reached is noted as now.
  void ArmWatch(int watch, std::uint64_t target);
  // Whether the watch's target was reached, and when (CLOCK_MONOTONIC ns).
  bool WatchReached(int watch, std::uint64_t* reached_ns) const;

 private:
  SharedMachine& machine_;
  EngineSeat seat_;
  std::uint64_t now_;
};

// Whether the client's clock has reached `target` (or it failed, see FailEngineClient).
bool ServiceReached(SharedMachine& machine, const EngineSeat& seat, std::uint64_t target);

// Blocks until the client's clock reaches `target` (or the client leaves the engine or fails).
// Sleeps until the completion projected from the engine's state, at most 10 ms at a time, looking
// again on waking because other contexts' work changes the projection; contexts of dead processes
// are removed on the way, so they never stall their engine.
void WaitForService(SharedMachine& machine, const EngineSeat& seat, std::uint64_t target);

// A watch for a timing event of the seat's client; -1 when all of the device's are taken.
int AllocateWatch(SharedMachine& machine, const EngineSeat& seat);
void FreeWatch(SharedMachine& machine, int device, int watch);

// One client of a device's engines as a fault sees it (kernel_fault.h).
struct EngineClientInfo {
  int client = -1;          // index in the device's client table
  int slot = 0;             // the owning process's slot
  std::uint64_t owner = 0;  // that slot's owner word when the client joined
  std::uint64_t group = 0;  // its MPS server (0: none)
};
// The device's clients now.
std::vector<EngineClientInfo> ListEngineClients(SharedMachine& machine, int device);
// A fatal error took the client: its queued work is dropped, and waits on it end at once from
// now on. Nothing happens if the entry no longer belongs to `owner`.
void FailEngineClient(SharedMachine& machine, int device, int client, std::uint64_t owner);

// Ground truth, each with the device's engines simulated up to now first.
// Engine time the client has received since it joined (ns, weighted by its share of the SMs).
std::uint64_t ClientEngineNs(SharedMachine& machine, const EngineSeat& seat);
// Engine time the process in `slot` has received on `device`, over all its contexts (ns).
std::uint64_t ProcessEngineNs(SharedMachine& machine, const ProcessSlot& slot, int device);
// Time the device's engines were busy since the machine was created, each moment weighted by
// the share of the SMs in use, summed over its engines (ns; in MIG mode this can grow faster
// than real time, one engine per compute instance).
std::uint64_t DeviceBusyNs(SharedMachine& machine, int device);

// NVML's sample period for utilisation (nvml.h: between 1/6 s and 1 s depending on the product).
inline constexpr std::uint64_t kUtilizationPeriodNs = 1000000000 / 6;
// Percent of the last complete sample period during which the whole-GPU engine of `device` was
// busy (NVML's nvmlUtilization_t::gpu).
unsigned int DeviceUtilizationPercent(SharedMachine& machine, int device);

// One process's NVML utilisation sample on a device (nvmlDeviceGetProcessUtilization).
struct ProcessSample {
  pid_t pid = 0;
  std::uint64_t end_ns = 0;     // when its sample period ended (CLOCK_MONOTONIC)
  unsigned int sm_percent = 0;  // its engine time in that period, in percent of the period
};

// The samples of the last complete NVML sample period on `device`: one per attached process that
// received at least half a percent of the period's engine time.
std::vector<ProcessSample> ProcessSamples(SharedMachine& machine, int device);

// Removes clients whose process is gone (its slot freed or reused, or the process not running).
// Checks at most once per 10 ms per device unless `force`. Returns how many were removed.
int RemoveDeadClients(SharedMachine& machine, int device, bool force);

}  // namespace gpufrac::simgpu
