// Driver entry points for events: creation, recording on a stream, queries, synchronisation and
// elapsed time. Completion is the context's engine reaching the recorded point (engine.h); the
// elapsed time between two timing events is the real time between the moments the engine ran
// them, so it includes time the context waited for others.
#include <mutex>

#include "simgpu/core/engine.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"
#include "simgpu/cuda/event.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Context;
using simgpu::Driver;
using simgpu::Event;

constexpr unsigned int kCreateFlags =
    abi::CU_EVENT_BLOCKING_SYNC | abi::CU_EVENT_DISABLE_TIMING | abi::CU_EVENT_INTERPROCESS;

Event* LiveEvent(abi::CUevent handle) {
  auto* event = reinterpret_cast<Event*>(handle);
  return event != nullptr && event->magic == Event::kMagic ? event : nullptr;
}

// Whether the recorded work is done; an event never recorded counts as done.
bool Completed(Driver* driver, const Event& event) {
  const Context* context = event.context;
  if (!event.recorded || !context->active.load(std::memory_order_acquire) ||
      context->activation.load(std::memory_order_relaxed) != event.activation) {
    return true;  // nothing recorded, or the context was reset and its work dropped
  }
  return simgpu::ServiceReached(*driver->machine, context->engine, event.target_ns);
}

CUresult Record(abi::CUevent handle, abi::CUstream stream, unsigned int flags,
                bool per_thread_default) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  Event* event = LiveEvent(handle);
  if (event == nullptr) return abi::CUDA_ERROR_INVALID_HANDLE;
  if ((flags & ~static_cast<unsigned int>(abi::CU_EVENT_RECORD_EXTERNAL)) != 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  // The stream resolves in the event's context: a stream of another context is refused.
  if (event->context != context) return abi::CUDA_ERROR_INVALID_HANDLE;
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, stream, per_thread_default, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (queue.capturing) return simgpu::InvalidateCapture(queue);
  // A zero-length piece of work: it completes when everything before it on the stream has.
  event->target_ns = simgpu::EnqueueWork(*driver->machine, context, queue, 0, 0, event->watch);
  event->activation = context->activation.load(std::memory_order_relaxed);
  event->recorded = true;
  return abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuEventCreate(abi::CUevent* handle, unsigned int flags) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (handle == nullptr || (flags & ~kCreateFlags) != 0) return abi::CUDA_ERROR_INVALID_VALUE;
  // Documented: an interprocess event must also disable timing.
  if ((flags & abi::CU_EVENT_INTERPROCESS) != 0 && (flags & abi::CU_EVENT_DISABLE_TIMING) == 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  int watch = -1;
  if ((flags & abi::CU_EVENT_DISABLE_TIMING) == 0) {
    watch = simgpu::AllocateWatch(*driver->machine, context->engine);
    if (watch < 0) return abi::CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard lock(driver->mu);
  Event* event;
  if (driver->free_events.empty()) {
    event = new Event;
  } else {
    event = driver->free_events.back();
    driver->free_events.pop_back();
  }
  *event = Event{};
  event->context = context;
  event->flags = flags;
  event->watch = watch;
  driver->events.insert(event);
  *handle = simgpu::ToHandle(event);
  return abi::CUDA_SUCCESS;
}

// Work recorded before still completes; only the event goes.
CUresult cuEventDestroy_v2(abi::CUevent handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  auto* event = reinterpret_cast<Event*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->events.count(event) == 0) return abi::CUDA_ERROR_INVALID_HANDLE;
  if (event->watch >= 0) {
    simgpu::FreeWatch(*driver->machine, event->context->engine.device, event->watch);
  }
  event->magic = 0;
  driver->events.erase(event);
  driver->free_events.push_back(event);
  return abi::CUDA_SUCCESS;
}

// The pre-4.0 name; the same call.
CUresult cuEventDestroy(abi::CUevent handle) { return cuEventDestroy_v2(handle); }

CUresult cuEventRecord(abi::CUevent event, abi::CUstream stream) {
  return Record(event, stream, abi::CU_EVENT_RECORD_DEFAULT, /*per_thread_default=*/false);
}

CUresult cuEventRecord_ptsz(abi::CUevent event, abi::CUstream stream) {
  return Record(event, stream, abi::CU_EVENT_RECORD_DEFAULT, /*per_thread_default=*/true);
}

CUresult cuEventRecordWithFlags(abi::CUevent event, abi::CUstream stream, unsigned int flags) {
  return Record(event, stream, flags, /*per_thread_default=*/false);
}

CUresult cuEventRecordWithFlags_ptsz(abi::CUevent event, abi::CUstream stream, unsigned int flags) {
  return Record(event, stream, flags, /*per_thread_default=*/true);
}

CUresult cuEventQuery(abi::CUevent handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  const Event* event = LiveEvent(handle);
  if (event == nullptr) return abi::CUDA_ERROR_INVALID_HANDLE;
  return Completed(driver, *event) ? abi::CUDA_SUCCESS : abi::CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(abi::CUevent handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  const Event* event = LiveEvent(handle);
  if (event == nullptr) return abi::CUDA_ERROR_INVALID_HANDLE;
  if (!Completed(driver, *event)) {
    simgpu::WaitForService(*driver->machine, event->context->engine, event->target_ns);
  }
  return simgpu::StickyErrorOf(driver, event->context);
}

CUresult cuEventElapsedTime_v2(float* milliseconds, abi::CUevent start, abi::CUevent end) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (milliseconds == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  const Event* first = LiveEvent(start);
  const Event* second = LiveEvent(end);
  // Documented: never recorded, or created with CU_EVENT_DISABLE_TIMING, is an invalid handle.
  if (first == nullptr || second == nullptr || !first->recorded || !second->recorded ||
      first->watch < 0 || second->watch < 0) {
    return abi::CUDA_ERROR_INVALID_HANDLE;
  }
  if (!Completed(driver, *first) || !Completed(driver, *second)) {
    return abi::CUDA_ERROR_NOT_READY;
  }
  std::uint64_t first_ns = 0;
  std::uint64_t second_ns = 0;
  {
    simgpu::EngineSession session(*driver->machine, first->context->engine);
    if (!session.WatchReached(first->watch, &first_ns)) return abi::CUDA_ERROR_NOT_READY;
  }
  {
    simgpu::EngineSession session(*driver->machine, second->context->engine);
    if (!session.WatchReached(second->watch, &second_ns)) return abi::CUDA_ERROR_NOT_READY;
  }
  *milliseconds = static_cast<float>((static_cast<double>(second_ns) - first_ns) / 1e6);
  return abi::CUDA_SUCCESS;
}

// The CUDA 12.8 symbol takes the same arguments and reports the same time.
CUresult cuEventElapsedTime(float* milliseconds, abi::CUevent start, abi::CUevent end) {
  return cuEventElapsedTime_v2(milliseconds, start, end);
}

}  // extern "C"
