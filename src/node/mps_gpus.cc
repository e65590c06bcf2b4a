// The node's GPUs in MPS mode and their daemons' workers (see mps_gpus.h).
#include "node/mps_gpus.h"

#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <set>

#include "common/log.h"
#include "common/posix.h"
#include "common/units.h"
#include "launch/limit_file.h"

namespace gpufrac::node {
namespace {

// How often an idle worker looks whether its daemon still runs.
constexpr auto kWatchInterval = std::chrono::milliseconds(100);

}  // namespace

MpsGpus::~MpsGpus() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  for (auto& [index, lane] : lanes_) {
    if (lane.thread.joinable()) lane.thread.join();
  }
}

Status MpsGpus::Record(const std::vector<machine::NodeGpu>& gpus) const {
  std::string text;
  for (const machine::NodeGpu& g : gpus) {
    if (g.mode == gpu::GpuMode::kMps) text += std::to_string(g.index) + "\n";
  }
  const std::string path = options_.state_dir + "/mps-gpus";
  const std::string next = path + ".new";
  unlink(next.c_str());
  GPUFRAC_RETURN_IF_ERROR(launch::WriteNewFile(next, text, 0644));
  if (rename(next.c_str(), path.c_str()) != 0) {
    return UnavailableError(ErrnoStatus("cannot write " + path, errno).message());
  }
  return OkStatus();
}

Status MpsGpus::Load(std::vector<machine::NodeGpu>* gpus) const {
  std::ifstream in(options_.state_dir + "/mps-gpus");
  if (!in) return Record(*gpus);  // The first start: --mps-gpus decides.
  std::set<int> recorded;
  for (int index; in >> index;) recorded.insert(index);
  for (machine::NodeGpu& g : *gpus) {
    if (g.mode == gpu::GpuMode::kMig || g.mode == gpu::GpuMode::kWhole) continue;
    const gpu::GpuMode mode = recorded.count(g.index) ? gpu::GpuMode::kMps : gpu::GpuMode::kShared;
    if (mode != g.mode) {
      LogInfo("GPU %d is in %s mode, as %s/mps-gpus records (gpufrac mps enable|disable)", g.index,
              std::string(gpu::GpuModeName(mode)).c_str(), options_.state_dir.c_str());
    }
    g.mode = mode;
  }
  return OkStatus();
}

Status MpsGpus::CheckModeChange(const machine::NodeGpu& gpu, bool enabled) const {
  const std::string name = "GPU " + std::to_string(gpu.index);
  if (gpu.mode == gpu::GpuMode::kMig) {
    return FailedPreconditionError(name +
                                   " is in MIG mode; turn MIG off first (gpufrac mig disable)");
  }
  if (gpu.mode == gpu::GpuMode::kWhole) {
    return FailedPreconditionError(name + " serves whole-GPU jobs only (gpufracd --whole-gpus)");
  }
  if (enabled && options_.control.empty()) {
    return FailedPreconditionError(
        "no nvidia-cuda-mps-control here: install the NVIDIA driver's compute utilities, or "
        "give gpufracd --mps-control PATH");
  }
  return OkStatus();
}

std::vector<launch::MpsClient> MpsGpus::NeedsOf(const std::vector<launch::GpuGrant>& grants,
                                                const std::vector<machine::NodeGpu>& gpus,
                                                const std::vector<launch::GpuGrant>& others) {
  std::vector<launch::MpsClient> needs;
  for (const launch::GpuGrant& share : grants) {
    const bool mps = std::any_of(gpus.begin(), gpus.end(), [&](const machine::NodeGpu& g) {
      return g.index == share.index && g.mode == gpu::GpuMode::kMps;
    });
    if (!mps || share.milli >= kMilliPerGpu) continue;
    // All clients here are one user's (the scheduler keeps other users off the GPU).
    launch::MpsClient most = launch::MpsClientOf(share);
    for (const launch::GpuGrant& other : others) {
      if (other.index != share.index) continue;
      const launch::MpsClient client = launch::MpsClientOf(other);
      most.thread_percentage = std::max(most.thread_percentage, client.thread_percentage);
      most.pinned_mib = std::max(most.pinned_mib, client.pinned_mib);
    }
    needs.push_back(most);
  }
  return needs;
}

void MpsGpus::Prepare(int64_t job, std::vector<launch::MpsClient> needs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[job] = Pending{.left = needs.size(), .pipes = {}, .status = OkStatus()};
  }
  for (const launch::MpsClient& need : needs) {
    Post(need.index, {.at_exit = false, .run = [this, job, need](machine::MpsDaemons& daemons) {
                        StatusOr<std::string> pipe = daemons.Ensure(need.index, need.uuid);
                        if (pipe.ok()) {
                          Status set = daemons.SetLimits(need.index,
                                                         static_cast<int>(need.thread_percentage),
                                                         need.pinned_mib);
                          if (!set.ok()) pipe = set;
                        }
                        Done(job, need.index, std::move(pipe));
                      }});
  }
}

void MpsGpus::Done(int64_t job, int index, StatusOr<std::string> pipe) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(job);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    if (pipe.ok()) {
      p.pipes[index] = *pipe;
    } else if (p.status.ok()) {
      p.status = pipe.status();
    }
    if (--p.left > 0) return;
    prepared_.push_back({.job = job,
                         .pipes = p.status.ok() ? StatusOr<std::map<int, std::string>>(p.pipes)
                                                : StatusOr<std::map<int, std::string>>(p.status)});
    pending_.erase(it);
  }
  Wake();
}

std::vector<MpsGpus::Prepared> MpsGpus::TakePrepared() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(prepared_, {});
}

void MpsGpus::Keep(int64_t job, const std::vector<launch::GpuGrant>& grants,
                   const std::vector<machine::NodeGpu>& gpus) {
  for (const launch::GpuGrant& share : grants) {
    for (const machine::NodeGpu& g : gpus) {
      if (g.index != share.index || g.mode != gpu::GpuMode::kMps) continue;
      Post(g.index, {.at_exit = true,
                     .run = [job, index = g.index, uuid = g.uuid](machine::MpsDaemons& daemons) {
                       if (StatusOr<std::string> pipe = daemons.Ensure(index, uuid); !pipe.ok()) {
                         LogWarning("job %lld runs on GPU %d, whose MPS daemon is gone: %s",
                                    static_cast<long long>(job), index,
                                    pipe.status().message().c_str());
                       }
                     }});
    }
  }
}

void MpsGpus::Stop(int index) {
  Post(index,
       {.at_exit = true, .run = [index](machine::MpsDaemons& daemons) { daemons.Stop(index); }});
}

std::vector<machine::MpsDaemons::Ended> MpsGpus::TakeEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(ended_, {});
}

void MpsGpus::Post(int index, Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Lane& lane = lanes_[index];
    lane.tasks.push_back(std::move(task));
    if (!lane.thread.joinable()) lane.thread = std::thread([this, index] { Work(index); });
  }
  work_.notify_all();
}

void MpsGpus::Wake() {
  if (options_.wake) options_.wake();
}

void MpsGpus::Work(int index) {
  // This GPU's daemon, used by this thread only; its destructor, at the end, stops it if idle.
  machine::MpsDaemons daemons(
      {.dir = options_.state_dir + "/mps", .control = options_.control, .env = options_.env});
  std::unique_lock<std::mutex> lock(mu_);
  Lane& lane = lanes_[index];  // A map's element stays where it is.
  for (;;) {
    if (lane.tasks.empty()) {
      if (stopping_) break;
      work_.wait_for(lock, kWatchInterval, [&] { return stopping_ || !lane.tasks.empty(); });
      if (!lane.tasks.empty() || stopping_) continue;
      lock.unlock();
      std::vector<machine::MpsDaemons::Ended> ended = daemons.Watch();
      lock.lock();
      if (ended.empty()) continue;
      ended_.insert(ended_.end(), ended.begin(), ended.end());
      lock.unlock();
      Wake();
      lock.lock();
      continue;
    }
    Task task = std::move(lane.tasks.front());
    lane.tasks.pop_front();
    if (stopping_ && !task.at_exit) continue;
    lock.unlock();
    task.run(daemons);
    lock.lock();
  }
}

}  // namespace gpufrac::node
