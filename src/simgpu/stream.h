// Streams of the simulated driver: created streams, the legacy default stream (the NULL handle
// or CU_STREAM_LEGACY) and the per-thread default stream (CU_STREAM_PER_THREAD, or NULL in the
// _ptsz entry points), each reduced to the time its queued work completes on its context's
// engine clock (engine.h). Within a context, streams follow CUDA's ordering rules in that clock.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "simgpu/context.h"
#include "simgpu/shared_machine.h"

namespace gpufrac::simgpu {

struct Stream {
  static constexpr std::uint32_t kMagic = 0x5374726d;

  std::uint32_t magic = kMagic;  // cleared when the stream is destroyed
  Context* context = nullptr;
  unsigned int flags = 0;
  std::atomic<std::uint64_t> done_ns{0};
};

inline abi::CUstream ToHandle(Stream* stream) { return reinterpret_cast<abi::CUstream>(stream); }

// Where work queued on a stream handle goes and what it must wait for.
struct StreamQueue {
  std::atomic<std::uint64_t>* done = nullptr;  // the stream's completion time
  bool legacy = false;    // the legacy default stream: waits for all blocking streams
  bool blocking = false;  // the legacy stream or one that waits for it
};

// Resolves a stream handle used in `context`. `per_thread_default` says what NULL means (true in
// the _ptsz entry points). Returns CUDA_ERROR_INVALID_HANDLE for a destroyed stream or one of
// another context.
abi::CUresult ResolveStream(Context* context, abi::CUstream handle, bool per_thread_default,
                            StreamQueue* queue);

// Queues `duration_ns` of work on the stream; returns at once with the engine-clock time at which
// it completes.
std::uint64_t EnqueueWork(SharedMachine& machine, Context* context, const StreamQueue& queue,
                          std::uint64_t duration_ns);

// Blocks until the context's engine clock reaches `done` (a completion time from above).
void WaitForStreamWork(SharedMachine& machine, const Context* context, std::uint64_t done);

// Forgets the calling thread's per-thread default streams (in a forked child).
void ForgetPerThreadStreams();

}  // namespace gpufrac::simgpu
