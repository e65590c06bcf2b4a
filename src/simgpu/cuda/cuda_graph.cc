// Driver entry points for CUDA graphs, kernel nodes only: building a graph node by node or by
// capturing a stream's kernel launches, instantiating it in a context, and launching it as one
// unit of work that lasts the graph's critical path (graph.h). Graph objects are checked against
// the driver's sets before use, so stale handles fail cleanly.
#include <algorithm>
#include <mutex>

#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"
#include "simgpu/cuda/graph.h"
#include "simgpu/cuda/kernel.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Context;
using simgpu::Driver;
using simgpu::Graph;
using simgpu::GraphExec;
using simgpu::GraphNode;
using simgpu::Stream;

constexpr unsigned long long kInstantiateFlags =
    abi::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | abi::CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
    abi::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
    abi::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

// What both versions of the kernel node parameters say.
struct KernelNode {
  abi::CUfunction func;
  simgpu::KernelShape shape;
  void** params;
  void** extra;
};

CUresult AddKernelNode(abi::CUgraphNode* handle, abi::CUgraph graph_handle,
                       const abi::CUgraphNode* dependencies, size_t count,
                       const KernelNode& kernel) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr || (count > 0 && dependencies == nullptr)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  if (simgpu::CheckKernel(kernel.func, kernel.shape, kernel.params, kernel.extra) !=
      abi::CUDA_SUCCESS) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  auto* graph = reinterpret_cast<Graph*>(graph_handle);
  std::lock_guard lock(driver->mu);
  if (driver->graphs.count(graph) == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  std::vector<int> after;
  for (size_t i = 0; i < count; ++i) {
    // A dependency must be a node of this graph, named once (found by address: a stale handle
    // is never dereferenced).
    const auto* wanted = reinterpret_cast<const GraphNode*>(dependencies[i]);
    const auto found = std::find_if(graph->nodes.begin(), graph->nodes.end(),
                                    [&](const auto& node) { return node.get() == wanted; });
    if (found == graph->nodes.end()) return abi::CUDA_ERROR_INVALID_VALUE;
    const int index = (*found)->index;
    if (std::find(after.begin(), after.end(), index) != after.end()) {
      return abi::CUDA_ERROR_INVALID_VALUE;
    }
    after.push_back(index);
  }
  *handle = simgpu::ToHandle(graph->AddKernel(kernel.shape, std::move(after)));
  return abi::CUDA_SUCCESS;
}

template <typename Params>
KernelNode FromParams(const Params& params) {
  return KernelNode{.func = params.func,
                    .shape = {.grid = {params.gridDimX, params.gridDimY, params.gridDimZ},
                              .block = {params.blockDimX, params.blockDimY, params.blockDimZ}},
                    .params = params.kernelParams,
                    .extra = params.extra};
}

CUresult BeginCapture(abi::CUstream handle, abi::CUstreamCaptureMode mode) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (mode != abi::CU_STREAM_CAPTURE_MODE_GLOBAL &&
      mode != abi::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != abi::CU_STREAM_CAPTURE_MODE_RELAXED) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  // Documented: the legacy stream cannot be captured. The simulator captures created streams
  // only, so the per-thread default stream is refused the same way.
  if (handle == nullptr || handle == abi::CU_STREAM_LEGACY || handle == abi::CU_STREAM_PER_THREAD) {
    return abi::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, handle, false, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  std::lock_guard lock(driver->mu);
  Stream* stream = queue.stream;
  if (stream->capture != nullptr) return abi::CUDA_ERROR_ILLEGAL_STATE;
  stream->capture = new Graph;
  driver->graphs.insert(stream->capture);
  stream->capture_last = -1;
  stream->capture_invalidated = false;
  return abi::CUDA_SUCCESS;
}

CUresult EndCapture(abi::CUstream handle, abi::CUgraph* graph) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (graph == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  auto* stream = reinterpret_cast<Stream*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->streams.count(stream) == 0 || stream->capture == nullptr) {
    return abi::CUDA_ERROR_ILLEGAL_STATE;  // not capturing
  }
  if (stream->capture_invalidated) {
    driver->DiscardCaptureLocked(stream);
    *graph = nullptr;
    return abi::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *graph = simgpu::ToHandle(stream->capture);
  stream->capture = nullptr;  // the graph is the caller's now
  stream->capture_last = -1;
  return abi::CUDA_SUCCESS;
}

CUresult LaunchGraph(abi::CUgraphExec handle, abi::CUstream stream, bool per_thread_default) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  auto* exec = reinterpret_cast<GraphExec*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->graph_execs.count(exec) == 0 || exec->context != context) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, stream, per_thread_default, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  // A graph launched into a capture would become a child-graph node; not simulated.
  if (queue.capturing) return simgpu::InvalidateCapture(queue);
  const std::uint64_t activation = context->activation.load(std::memory_order_relaxed);
  const std::uint64_t previous = exec->activation == activation ? exec->done_ns : 0;
  exec->done_ns =
      simgpu::EnqueueWork(*driver->machine, context, queue, exec->duration_ns, previous);
  exec->activation = activation;
  return abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuGraphCreate(abi::CUgraph* graph, unsigned int flags) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (graph == nullptr || flags != 0) return abi::CUDA_ERROR_INVALID_VALUE;
  auto* created = new Graph;
  std::lock_guard lock(driver->mu);
  driver->graphs.insert(created);
  *graph = simgpu::ToHandle(created);
  return abi::CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode(abi::CUgraphNode* node, abi::CUgraph graph,
                              const abi::CUgraphNode* dependencies, size_t count,
                              const abi::CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (params == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  return AddKernelNode(node, graph, dependencies, count, FromParams(*params));
}

// The CUDA 12 parameters may name a CUkernel instead of a function; the simulator has no
// libraries (cuLibraryLoad), so only `func` is accepted.
CUresult cuGraphAddKernelNode_v2(abi::CUgraphNode* node, abi::CUgraph graph,
                                 const abi::CUgraphNode* dependencies, size_t count,
                                 const abi::CUDA_KERNEL_NODE_PARAMS_v2* params) {
  if (params == nullptr || params->func == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  return AddKernelNode(node, graph, dependencies, count, FromParams(*params));
}

CUresult cuStreamBeginCapture(abi::CUstream stream) {
  return BeginCapture(stream, abi::CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamBeginCapture_ptsz(abi::CUstream stream) {
  return BeginCapture(stream, abi::CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamBeginCapture_v2(abi::CUstream stream, abi::CUstreamCaptureMode mode) {
  return BeginCapture(stream, mode);
}

CUresult cuStreamBeginCapture_v2_ptsz(abi::CUstream stream, abi::CUstreamCaptureMode mode) {
  return BeginCapture(stream, mode);
}

CUresult cuStreamEndCapture(abi::CUstream stream, abi::CUgraph* graph) {
  return EndCapture(stream, graph);
}

CUresult cuStreamEndCapture_ptsz(abi::CUstream stream, abi::CUgraph* graph) {
  return EndCapture(stream, graph);
}

CUresult cuGraphInstantiateWithFlags(abi::CUgraphExec* exec, abi::CUgraph graph_handle,
                                     unsigned long long flags) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (exec == nullptr || (flags & ~kInstantiateFlags) != 0) return abi::CUDA_ERROR_INVALID_VALUE;
  const auto* graph = reinterpret_cast<const Graph*>(graph_handle);
  std::lock_guard lock(driver->mu);
  if (driver->graphs.count(const_cast<Graph*>(graph)) == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  auto* instance = new GraphExec;
  instance->context = context;
  instance->duration_ns = simgpu::CriticalPathNs(*graph, context->kernel_ns_per_thread);
  driver->graph_execs.insert(instance);
  *exec = simgpu::ToHandle(instance);
  return abi::CUDA_SUCCESS;
}

CUresult cuGraphLaunch(abi::CUgraphExec exec, abi::CUstream stream) {
  return LaunchGraph(exec, stream, /*per_thread_default=*/false);
}

CUresult cuGraphLaunch_ptsz(abi::CUgraphExec exec, abi::CUstream stream) {
  return LaunchGraph(exec, stream, /*per_thread_default=*/true);
}

// Launches already queued still run.
CUresult cuGraphExecDestroy(abi::CUgraphExec handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  auto* exec = reinterpret_cast<GraphExec*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->graph_execs.erase(exec) == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  delete exec;
  return abi::CUDA_SUCCESS;
}

// Executable graphs made from it are independent of it and stay usable.
CUresult cuGraphDestroy(abi::CUgraph handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  auto* graph = reinterpret_cast<Graph*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->graphs.erase(graph) == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  delete graph;
  return abi::CUDA_SUCCESS;
}

}  // extern "C"
