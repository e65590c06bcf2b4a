// Stream handle resolution and simulated work queueing.
#include "simgpu/cuda/stream.h"

#include "simgpu/core/engine.h"
#include "simgpu/core/sim_time.h"

namespace gpufrac::simgpu {
namespace {

// The per-thread default streams of the calling thread, one per context it has used recently.
// A thread rarely alternates between more contexts than this; an evicted entry loses only its
// completion time, which cuCtxSynchronize still covers through Context::blocking_done_ns.
constexpr int kPerThreadStreamCache = 4;
struct PerThreadStream {
  const Context* context = nullptr;
  std::uint64_t activation = 0;  // the context's activation the entry belongs to
  std::atomic<std::uint64_t> done_ns{0};
};
thread_local PerThreadStream t_per_thread_streams[kPerThreadStreamCache];
thread_local int t_next_eviction = 0;

std::atomic<std::uint64_t>* PerThreadStreamOf(const Context* context) {
  const std::uint64_t activation = context->activation.load(std::memory_order_relaxed);
  for (PerThreadStream& entry : t_per_thread_streams) {
    if (entry.context != context) continue;
    if (entry.activation != activation) {
      // Work from before a reset was dropped with the old engine clock.
      entry.activation = activation;
      entry.done_ns.store(0, std::memory_order_relaxed);
    }
    return &entry.done_ns;
  }
  PerThreadStream& entry = t_per_thread_streams[t_next_eviction];
  t_next_eviction = (t_next_eviction + 1) % kPerThreadStreamCache;
  entry.context = context;
  entry.activation = activation;
  entry.done_ns.store(0, std::memory_order_relaxed);
  return &entry.done_ns;
}

}  // namespace

abi::CUresult ResolveStream(Context* context, abi::CUstream handle, bool per_thread_default,
                            StreamQueue* queue) {
  if (handle == nullptr)
    handle = per_thread_default ? abi::CU_STREAM_PER_THREAD : abi::CU_STREAM_LEGACY;
  if (handle == abi::CU_STREAM_LEGACY) {
    *queue = StreamQueue{.done = &context->legacy_done_ns, .legacy = true, .blocking = true};
    return abi::CUDA_SUCCESS;
  }
  if (handle == abi::CU_STREAM_PER_THREAD) {
    // The per-thread default stream is a blocking stream.
    *queue = StreamQueue{.done = PerThreadStreamOf(context), .blocking = true};
    return abi::CUDA_SUCCESS;
  }
  Stream* stream = reinterpret_cast<Stream*>(handle);
  if (stream->magic != Stream::kMagic || stream->context != context) {
    return abi::CUDA_ERROR_INVALID_HANDLE;
  }
  *queue = StreamQueue{.done = &stream->done_ns,
                       .blocking = (stream->flags & abi::CU_STREAM_NON_BLOCKING) == 0,
                       .stream = stream,
                       .capturing = stream->capture != nullptr};
  return abi::CUDA_SUCCESS;
}

std::uint64_t EnqueueWork(SharedMachine& machine, Context* context, const StreamQueue& queue,
                          std::uint64_t duration_ns, std::uint64_t also_after, int watch) {
  if (!context->engine.valid()) return 0;  // the process is exiting
  EngineSession session(machine, context->engine);
  const std::uint64_t now = session.Served();
  std::uint64_t end;
  if (!queue.blocking) {
    end = Enqueue(*queue.done, now, also_after, duration_ns);
    AtomicMax(context->non_blocking_done_ns, end);
  } else {
    // The legacy stream and the blocking streams wait for each other.
    std::uint64_t after = queue.legacy ? context->blocking_done_ns.load(std::memory_order_relaxed)
                                       : context->legacy_done_ns.load(std::memory_order_relaxed);
    if (also_after > after) after = also_after;
    end = Enqueue(*queue.done, now, after, duration_ns);
    AtomicMax(context->blocking_done_ns, end);
  }
  session.AddWork(end);
  if (watch >= 0) session.ArmWatch(watch, end);
  return end;
}

void WaitForPoint(SharedMachine& machine, Context* context, const StreamQueue& queue,
                  std::uint64_t point) {
  if (!context->engine.valid()) return;
  EngineSession session(machine, context->engine);
  AtomicMax(*queue.done, point);
  AtomicMax(queue.blocking ? context->blocking_done_ns : context->non_blocking_done_ns, point);
}

abi::CUresult InvalidateCapture(const StreamQueue& queue) {
  if (queue.stream != nullptr) queue.stream->capture_invalidated = true;
  return abi::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

void WaitForStreamWork(SharedMachine& machine, const Context* context, std::uint64_t done) {
  WaitForService(machine, context->engine, done);
}

void ForgetPerThreadStreams() {
  for (PerThreadStream& entry : t_per_thread_streams) {
    entry.context = nullptr;
    entry.done_ns.store(0, std::memory_order_relaxed);
  }
}

}  // namespace gpufrac::simgpu
