// Driver entry points for streams: creation and destruction, synchronisation and queries (which
// wait for or look at the context's compute engine, engine.h) and waiting for events. Launches
// are in cuda_launch.cc.
#include "simgpu/core/sim_time.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Context;
using simgpu::Driver;
using simgpu::Stream;

bool IsSpecialStream(abi::CUstream stream) {
  return stream == nullptr || stream == abi::CU_STREAM_LEGACY ||
         stream == abi::CU_STREAM_PER_THREAD;
}

// The context and queue of a stream handle: a created stream knows its context, which need not
// be current; the default streams are the current context's.
CUresult StreamOf(abi::CUstream handle, bool per_thread_default, Driver** driver, Context** context,
                  simgpu::StreamQueue* queue) {
  if (!IsSpecialStream(handle)) {
    if (CUresult result = simgpu::GetDriver(driver); result != abi::CUDA_SUCCESS) return result;
    const auto* stream = reinterpret_cast<const Stream*>(handle);
    if (stream->magic != Stream::kMagic) return abi::CUDA_ERROR_INVALID_HANDLE;
    *context = stream->context;
  } else if (CUresult result = simgpu::GetDriverAndContext(driver, context);
             result != abi::CUDA_SUCCESS) {
    return result;
  }
  return simgpu::ResolveStream(*context, handle, per_thread_default, queue);
}

CUresult Synchronize(abi::CUstream handle, bool per_thread_default) {
  Driver* driver;
  Context* context;
  simgpu::StreamQueue queue;
  if (CUresult result = StreamOf(handle, per_thread_default, &driver, &context, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (queue.capturing) return simgpu::InvalidateCapture(queue);
  simgpu::WaitForStreamWork(*driver->machine, context, queue.done->load(std::memory_order_relaxed));
  return simgpu::StickyErrorOf(driver, context);  // a fatal error may have ended the wait
}

CUresult Query(abi::CUstream handle, bool per_thread_default) {
  Driver* driver;
  Context* context;
  simgpu::StreamQueue queue;
  if (CUresult result = StreamOf(handle, per_thread_default, &driver, &context, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (queue.capturing) return simgpu::InvalidateCapture(queue);
  return simgpu::ServiceReached(*driver->machine, context->engine,
                                queue.done->load(std::memory_order_relaxed))
             ? abi::CUDA_SUCCESS
             : abi::CUDA_ERROR_NOT_READY;
}

// cuStreamIsCapturing: whether work on the stream is being captured into a graph (ACTIVE), was
// being captured until an unsupported call invalidated it (INVALIDATED), or runs (NONE).
CUresult CaptureStatus(abi::CUstream handle, abi::CUstreamCaptureStatus* status,
                       bool per_thread_default) {
  if (status == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  Driver* driver;
  Context* context;
  simgpu::StreamQueue queue;
  if (CUresult result = StreamOf(handle, per_thread_default, &driver, &context, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  *status = !queue.capturing ? abi::CU_STREAM_CAPTURE_STATUS_NONE
            : queue.stream && queue.stream->capture_invalidated
                ? abi::CU_STREAM_CAPTURE_STATUS_INVALIDATED
                : abi::CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return abi::CUDA_SUCCESS;
}

CUresult WaitEvent(abi::CUstream handle, abi::CUevent event_handle, unsigned int flags,
                   bool per_thread_default) {
  Driver* driver;
  Context* context;
  simgpu::StreamQueue queue;
  if (CUresult result = StreamOf(handle, per_thread_default, &driver, &context, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  const auto* event = reinterpret_cast<const simgpu::Event*>(event_handle);
  if (event == nullptr || event->magic != simgpu::Event::kMagic) {
    return abi::CUDA_ERROR_INVALID_HANDLE;
  }
  if ((flags & ~static_cast<unsigned int>(abi::CU_EVENT_WAIT_EXTERNAL)) != 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  if (queue.capturing) return simgpu::InvalidateCapture(queue);
  // Nothing recorded: nothing to wait for.
  if (!event->recorded) return abi::CUDA_SUCCESS;
  const Context* recorder = event->context;
  if (recorder == context) {
    if (event->activation == context->activation.load(std::memory_order_relaxed)) {
      simgpu::WaitForPoint(*driver->machine, context, queue, event->target_ns);
    }
    return abi::CUDA_SUCCESS;
  }
  // Another context's engine clock cannot order this one's work: the simulator waits on the
  // host until the event has completed (a documented deviation), after which nothing is left
  // to wait for.
  if (recorder->active.load(std::memory_order_acquire) &&
      event->activation == recorder->activation.load(std::memory_order_relaxed)) {
    simgpu::WaitForService(*driver->machine, recorder->engine, event->target_ns);
  }
  return abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuStreamCreate(abi::CUstream* handle, unsigned int flags) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (handle == nullptr || (flags & ~abi::CU_STREAM_NON_BLOCKING) != 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(driver->mu);
  Stream* stream;
  if (driver->free_streams.empty()) {
    stream = new Stream;
  } else {
    stream = driver->free_streams.back();
    driver->free_streams.pop_back();
  }
  stream->context = context;
  stream->flags = flags;
  stream->done_ns.store(0, std::memory_order_relaxed);
  stream->magic = Stream::kMagic;
  driver->streams.insert(stream);
  *handle = simgpu::ToHandle(stream);
  return abi::CUDA_SUCCESS;
}

// Work already queued still completes (and cuCtxSynchronize still waits for it); a capture in
// progress is abandoned.
CUresult cuStreamDestroy_v2(abi::CUstream handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  auto* stream = reinterpret_cast<Stream*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->streams.count(stream) == 0) return abi::CUDA_ERROR_INVALID_HANDLE;
  driver->DiscardCaptureLocked(stream);
  stream->magic = 0;
  driver->streams.erase(stream);
  driver->free_streams.push_back(stream);
  return abi::CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(abi::CUstream stream) {
  return Synchronize(stream, /*per_thread_default=*/false);
}

CUresult cuStreamSynchronize_ptsz(abi::CUstream stream) {
  return Synchronize(stream, /*per_thread_default=*/true);
}

CUresult cuStreamQuery(abi::CUstream stream) { return Query(stream, /*per_thread_default=*/false); }

CUresult cuStreamIsCapturing(abi::CUstream stream, abi::CUstreamCaptureStatus* status) {
  return CaptureStatus(stream, status, /*per_thread_default=*/false);
}

CUresult cuStreamIsCapturing_ptsz(abi::CUstream stream, abi::CUstreamCaptureStatus* status) {
  return CaptureStatus(stream, status, /*per_thread_default=*/true);
}

CUresult cuStreamQuery_ptsz(abi::CUstream stream) {
  return Query(stream, /*per_thread_default=*/true);
}

CUresult cuStreamWaitEvent(abi::CUstream stream, abi::CUevent event, unsigned int flags) {
  return WaitEvent(stream, event, flags, /*per_thread_default=*/false);
}

CUresult cuStreamWaitEvent_ptsz(abi::CUstream stream, abi::CUevent event, unsigned int flags) {
  return WaitEvent(stream, event, flags, /*per_thread_default=*/true);
}

}  // extern "C"
