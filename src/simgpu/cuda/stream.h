// Streams of the simulated driver: created streams, the legacy default stream (the NULL handle
// or CU_STREAM_LEGACY) and the per-thread default stream (CU_STREAM_PER_THREAD, or NULL in the
// _ptsz entry points), each reduced to the time its queued work completes on its context's
// engine clock (engine.h). Within a context, streams follow CUDA's ordering rules in that clock.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu/cuda/context.h"

namespace gpufrac::simgpu {

struct Graph;

struct Stream {
  static constexpr std::uint32_t kMagic = 0x5374726d;

  std::uint32_t magic = kMagic;  // cleared when the stream is destroyed
  Context* context = nullptr;
  unsigned int flags = 0;
  std::atomic<std::uint64_t> done_ns{0};
  // Stream capture (cuStreamBeginCapture .. cuStreamEndCapture): the graph being built, its
  // node the next captured kernel depends on (-1: none yet), and whether a call that cannot be
  // captured invalidated the capture. Guarded by the driver lock.
  Graph* capture = nullptr;
  int capture_last = -1;
  bool capture_invalidated = false;
};

inline abi::CUstream ToHandle(Stream* stream) { return reinterpret_cast<abi::CUstream>(stream); }

// Where work queued on a stream handle goes and what it must wait for.
struct StreamQueue {
  std::atomic<std::uint64_t>* done = nullptr;  // the stream's completion time
  bool legacy = false;       // the legacy default stream: waits for all blocking streams
  bool blocking = false;     // the legacy stream or one that waits for it
  Stream* stream = nullptr;  // a created stream; nullptr for the default streams
  bool capturing = false;    // the stream is being captured into a graph (see Stream)
};

// Resolves a stream handle used in `context`. `per_thread_default` says what NULL means (true in
// the _ptsz entry points). Returns CUDA_ERROR_INVALID_HANDLE for a destroyed stream or one of
// another context.
abi::CUresult ResolveStream(Context* context, abi::CUstream handle, bool per_thread_default,
                            StreamQueue* queue);

// Queues `duration_ns` of work on the stream, starting no earlier than `also_after` on the
// engine clock (a graph's previous launch); returns at once with the engine-clock time at which
// it completes. A `watch` (engine.h) of the context is armed for that time.
std::uint64_t EnqueueWork(SharedMachine& machine, Context* context, const StreamQueue& queue,
                          std::uint64_t duration_ns, std::uint64_t also_after = 0, int watch = -1);

// Makes the stream's next work wait until `point` on the context's engine clock
// (cuStreamWaitEvent on an event of the same context).
void WaitForPoint(SharedMachine& machine, Context* context, const StreamQueue& queue,
                  std::uint64_t point);

// A call that stream capture does not support was made on a capturing stream: the capture is
// invalidated (cuStreamEndCapture will fail) and the call fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
abi::CUresult InvalidateCapture(const StreamQueue& queue);

// Blocks until the context's engine clock reaches `done` (a completion time from above).
void WaitForStreamWork(SharedMachine& machine, const Context* context, std::uint64_t done);

// Forgets the calling thread's per-thread default streams (in a forked child).
void ForgetPerThreadStreams();

}  // namespace gpufrac::simgpu
