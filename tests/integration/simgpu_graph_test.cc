// Simulated driver: CUDA graphs of kernel nodes, built node by node or by stream capture,
// instantiated and launched as one unit of work lasting the graph's critical path.
#include <chrono>

#include "gpu/catalogue.h"
#include "simgpu/core/engine_truth.h"
#include "simgpu/core/sim_time.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry step()
{
  ret;
}
)";

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

abi::CUfunction LoadKernel() {
  abi::CUmodule module = nullptr;
  EXPECT_CU(cuModuleLoadData(&module, kPtx));
  abi::CUfunction function = nullptr;
  EXPECT_CU(cuModuleGetFunction(&function, module, "step"));
  return function;
}

// Blocks of 1024 threads for a kernel of about `ms` on an H100.
unsigned int BlocksFor(double ms) {
  const double threads = (ms * 1000 - kKernelLaunchLatencyNs / 1000.0) *
                         gpu::FindModel("H100-80GB")->sm_count * kResidentThreadsPerSm;
  return static_cast<unsigned int>(threads / 1024);
}

abi::CUDA_KERNEL_NODE_PARAMS_v2 Node(abi::CUfunction kernel, double ms) {
  abi::CUDA_KERNEL_NODE_PARAMS_v2 params{};
  params.func = kernel;
  params.gridDimX = BlocksFor(ms);
  params.gridDimY = params.gridDimZ = 1;
  params.blockDimX = 1024;
  params.blockDimY = params.blockDimZ = 1;
  return params;
}

double EngineMs(abi::CUcontext context) {
  unsigned long long ns = 0;
  EXPECT_CU(simgpuCtxGetEngineTime(context, &ns));
  return ns / 1e6;
}

using SimGpuGraphTest = SimGpuTest;

TEST_F(SimGpuGraphTest, AGraphRunsForItsCriticalPath) {
  RunInChild("1xH100-80GB", [] {
    const abi::CUcontext context = InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUgraph graph = nullptr;
    ASSERT_CU(cuGraphCreate(&graph, 0));
    // a (10 ms) -> b (10 ms); c (5 ms) beside them: 20 ms in all.
    abi::CUgraphNode a = nullptr;
    abi::CUgraphNode b = nullptr;
    abi::CUgraphNode c = nullptr;
    const abi::CUDA_KERNEL_NODE_PARAMS_v2 ten = Node(kernel, 10);
    ASSERT_CU(cuGraphAddKernelNode_v2(&a, graph, nullptr, 0, &ten));
    ASSERT_CU(cuGraphAddKernelNode_v2(&b, graph, &a, 1, &ten));
    abi::CUDA_KERNEL_NODE_PARAMS_v1 five{};
    const abi::CUDA_KERNEL_NODE_PARAMS_v2 five_v2 = Node(kernel, 5);
    five.func = five_v2.func;
    five.gridDimX = five_v2.gridDimX;
    five.gridDimY = five.gridDimZ = 1;
    five.blockDimX = 1024;
    five.blockDimY = five.blockDimZ = 1;
    ASSERT_CU(cuGraphAddKernelNode(&c, graph, nullptr, 0, &five));  // the CUDA 10 form

    abi::CUgraphExec exec = nullptr;
    ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
    abi::CUstream one = nullptr;
    abi::CUstream two = nullptr;
    ASSERT_CU(cuStreamCreate(&one, abi::CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuStreamCreate(&two, abi::CU_STREAM_NON_BLOCKING));
    double engine = EngineMs(context);
    Clock::time_point start = Clock::now();
    ASSERT_CU(cuGraphLaunch(exec, one));
    EXPECT_LT(MillisecondsSince(start), 5.0);  // asynchronous
    ASSERT_CU(cuStreamSynchronize(one));
    EXPECT_GE(MillisecondsSince(start), 19.9);
    EXPECT_NEAR(20.0, EngineMs(context) - engine, 0.01);

    // Launches of one executable graph run one after the other, even on different streams.
    start = Clock::now();
    ASSERT_CU(cuGraphLaunch(exec, one));
    ASSERT_CU(cuGraphLaunch(exec, two));
    ASSERT_CU(cuStreamSynchronize(two));
    EXPECT_GE(MillisecondsSince(start), 39.9);

    // The executable graph does not need its graph any more.
    EXPECT_CU(cuGraphDestroy(graph));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(graph));
    engine = EngineMs(context);
    ASSERT_CU(cuGraphLaunch_ptsz(exec, nullptr));
    ASSERT_CU(cuStreamSynchronize_ptsz(nullptr));
    EXPECT_NEAR(20.0, EngineMs(context) - engine, 0.01);
    EXPECT_CU(cuGraphExecDestroy(exec));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphExecDestroy(exec));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphLaunch(exec, one));
  });
}

TEST_F(SimGpuGraphTest, BuildingAndInstantiatingCheckTheirArguments) {
  RunInChild("1xH100-80GB", [] {
    abi::CUgraph graph = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_NOT_INITIALIZED, cuGraphCreate(&graph, 0));
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphCreate(nullptr, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphCreate(&graph, 1));
    ASSERT_CU(cuGraphCreate(&graph, 0));
    abi::CUgraph other = nullptr;
    ASSERT_CU(cuGraphCreate(&other, 0));
    const abi::CUDA_KERNEL_NODE_PARAMS_v2 params = Node(kernel, 1);
    abi::CUgraphNode foreign = nullptr;
    ASSERT_CU(cuGraphAddKernelNode_v2(&foreign, other, nullptr, 0, &params));
    abi::CUgraphNode node = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGraphAddKernelNode_v2(&node, graph, &foreign, 1, &params));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGraphAddKernelNode_v2(&node, graph, nullptr, 1, &params));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, nullptr));
    abi::CUDA_KERNEL_NODE_PARAMS_v2 bad = params;
    bad.blockDimX = 2048;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &bad));
    bad = params;
    bad.func = nullptr;  // a CUkernel instead: no libraries in the simulator
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &bad));
    ASSERT_CU(cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &params));
    const abi::CUgraphNode twice[] = {node, node};
    abi::CUgraphNode next = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGraphAddKernelNode_v2(&next, graph, twice, 2, &params));

    abi::CUgraphExec exec = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphInstantiateWithFlags(&exec, graph, 16));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphInstantiateWithFlags(nullptr, graph, 0));
    ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph,
                                          abi::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    EXPECT_CU(cuGraphDestroy(other));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphInstantiateWithFlags(&exec, other, 0));
    // An executable graph belongs to its context.
    abi::CUcontext second = nullptr;
    ASSERT_CU(cuCtxCreate_v2(&second, 0, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGraphLaunch(exec, nullptr));
    ASSERT_CU(cuCtxDestroy_v2(second));
  });
}

TEST_F(SimGpuGraphTest, StreamCaptureRecordsKernelsIntoAGraph) {
  RunInChild("1xH100-80GB", [] {
    const abi::CUcontext context = InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUstream stream = nullptr;
    ASSERT_CU(cuStreamCreate(&stream, abi::CU_STREAM_NON_BLOCKING));
    EXPECT_EQ(abi::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              cuStreamBeginCapture_v2(nullptr, abi::CU_STREAM_CAPTURE_MODE_GLOBAL));
    abi::CUgraph graph = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_ILLEGAL_STATE, cuStreamEndCapture(stream, &graph));

    const double engine = EngineMs(context);
    abi::CUstreamCaptureStatus status = abi::CU_STREAM_CAPTURE_STATUS_ACTIVE;
    ASSERT_CU(cuStreamIsCapturing(stream, &status));
    EXPECT_EQ(abi::CU_STREAM_CAPTURE_STATUS_NONE, status);
    ASSERT_CU(cuStreamBeginCapture_v2(stream, abi::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    ASSERT_CU(cuStreamIsCapturing(stream, &status));
    EXPECT_EQ(abi::CU_STREAM_CAPTURE_STATUS_ACTIVE, status);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuStreamIsCapturing(stream, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_ILLEGAL_STATE,
              cuStreamBeginCapture_v2(stream, abi::CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int i = 0; i < 3; ++i) {
      ASSERT_CU(
          cuLaunchKernel(kernel, BlocksFor(5), 1, 1, 1024, 1, 1, 0, stream, nullptr, nullptr));
    }
    ASSERT_CU(cuStreamEndCapture(stream, &graph));
    ASSERT_NE(nullptr, graph);
    ASSERT_CU(cuCtxSynchronize());
    EXPECT_EQ(engine, EngineMs(context));  // captured, not run

    abi::CUgraphExec exec = nullptr;
    ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
    const Clock::time_point start = Clock::now();
    ASSERT_CU(cuGraphLaunch(exec, stream));
    ASSERT_CU(cuStreamSynchronize(stream));
    EXPECT_GE(MillisecondsSince(start), 14.9);  // the three in sequence
    EXPECT_NEAR(15.0, EngineMs(context) - engine, 0.01);
    EXPECT_CU(cuGraphDestroy(graph));

    // Synchronising a capturing stream is not allowed and invalidates the capture.
    ASSERT_CU(cuStreamBeginCapture(stream));
    ASSERT_CU(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamSynchronize(stream));
    ASSERT_CU(cuStreamIsCapturing(stream, &status));
    EXPECT_EQ(abi::CU_STREAM_CAPTURE_STATUS_INVALIDATED, status);
    EXPECT_EQ(abi::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(stream, &graph));
    EXPECT_EQ(nullptr, graph);
    // A stream destroyed while capturing leaves nothing behind.
    ASSERT_CU(cuStreamBeginCapture_v2(stream, abi::CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT_CU(cuStreamDestroy_v2(stream));
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
