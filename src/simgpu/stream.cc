// Stream handle resolution and simulated work queueing.
#include "simgpu/stream.h"

#include "simgpu/abi_extras.h"
#include "simgpu/sim_time.h"

namespace gpufrac::simgpu {
namespace {

// The per-thread default streams of the calling thread, one per context it has used recently.
// A thread rarely alternates between more contexts than this; an evicted entry loses only its
// completion time, which cuCtxSynchronize still covers through Context::all_done_ns.
constexpr int kPerThreadStreamCache = 4;
struct PerThreadStream {
  const Context* context = nullptr;
  std::atomic<std::uint64_t> done_ns{0};
};
thread_local PerThreadStream t_per_thread_streams[kPerThreadStreamCache];
thread_local int t_next_eviction = 0;

std::atomic<std::uint64_t>* PerThreadStreamOf(const Context* context) {
  for (PerThreadStream& entry : t_per_thread_streams) {
    if (entry.context == context) return &entry.done_ns;
  }
  PerThreadStream& entry = t_per_thread_streams[t_next_eviction];
  t_next_eviction = (t_next_eviction + 1) % kPerThreadStreamCache;
  entry.context = context;
  entry.done_ns.store(0, std::memory_order_relaxed);
  return &entry.done_ns;
}

}  // namespace

abi::CUresult ResolveStream(Context* context, abi::CUstream handle, bool per_thread_default,
                            StreamQueue* queue) {
  if (handle == nullptr) handle = per_thread_default ? kStreamPerThread : kStreamLegacy;
  if (handle == kStreamLegacy) {
    *queue = StreamQueue{.done = &context->legacy_done_ns, .legacy = true};
    return abi::CUDA_SUCCESS;
  }
  if (handle == kStreamPerThread) {
    // The per-thread default stream is a blocking stream.
    *queue = StreamQueue{.done = PerThreadStreamOf(context), .waits_legacy = true};
    return abi::CUDA_SUCCESS;
  }
  Stream* stream = reinterpret_cast<Stream*>(handle);
  if (stream->magic != Stream::kMagic || stream->context != context) {
    return abi::CUDA_ERROR_INVALID_HANDLE;
  }
  *queue = StreamQueue{.done = &stream->done_ns,
                       .waits_legacy = (stream->flags & kStreamNonBlocking) == 0};
  return abi::CUDA_SUCCESS;
}

void EnqueueWork(Context* context, const StreamQueue& queue, std::uint64_t duration_ns) {
  const std::uint64_t now = NowNs();
  std::uint64_t after = 0;
  if (queue.legacy) {
    after = context->all_done_ns.load(std::memory_order_relaxed);
  } else if (queue.waits_legacy) {
    after = context->legacy_done_ns.load(std::memory_order_relaxed);
  }
  const std::uint64_t end = Enqueue(*queue.done, now, after, duration_ns);
  AtomicMax(context->all_done_ns, end);
}

void ForgetPerThreadStreams() {
  for (PerThreadStream& entry : t_per_thread_streams) {
    entry.context = nullptr;
    entry.done_ns.store(0, std::memory_order_relaxed);
  }
}

}  // namespace gpufrac::simgpu
