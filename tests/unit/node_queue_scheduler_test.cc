// The node service's queue scheduler: how requests become shares on each GPU model, what
// CheckFeasible refuses, and the queueing rules users rely on (priority, FIFO, quotas, backfill
// that never delays a blocked job, sticky reservations, no starvation), with a randomized check
// that no GPU or quota is ever over-committed and that every job eventually starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "node/queue_scheduler.h"

namespace gpufrac::node {
namespace {

// Whether `text` contains `part`, printing both when not.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kH100Memory = 81559 * kMiB;
constexpr uint64_t kA30Memory = 24576 * kMiB;

NodeGpu H100(int index) {
  return {index, "GPU-h100-" + std::to_string(index), "H100-80GB", kH100Memory, 500 * kMiB};
}
NodeGpu A30(int index) {
  return {index, "GPU-a30-" + std::to_string(index), "A30-24GB", kA30Memory, 400 * kMiB};
}

// Queues by (name, quota), highest priority first.
QueueConfig Queues(std::vector<std::pair<std::string, double>> specs) {
  QueueConfig c;
  for (auto& [name, quota] : specs) {
    QueueSpec q;
    q.name = name;
    q.default_request = GpuRequest::Whole(1);
    q.quota = quota;
    c.queues.push_back(q);
  }
  return c;
}

std::unique_ptr<QueueScheduler> Make(std::vector<NodeGpu> gpus, QueueConfig queues,
                                     SchedulerOptions options = {}) {
  auto s = QueueScheduler::Create(std::move(gpus), std::move(queues), std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

GpuGrant Share(int index, uint32_t milli, uint64_t memory) {
  return {.index = index, .uuid = "", .milli = milli, .memory_bytes = memory};
}

// The decision for `id` among `decisions`, or an empty one.
StartDecision Find(const std::vector<StartDecision>& decisions, int64_t id) {
  for (const StartDecision& d : decisions) {
    if (d.id == id) return d;
  }
  return {};
}

std::vector<int64_t> Ids(const std::vector<StartDecision>& decisions) {
  std::vector<int64_t> ids;
  for (const StartDecision& d : decisions) ids.push_back(d.id);
  return ids;
}

// ---- A small event loop: jobs arrive, run for a while and end; Schedule runs every step. ----

struct SimJob {
  int64_t id;
  int queue;
  GpuRequest request;
  int64_t submit_ms;
  int64_t duration_ms;
};
struct Initial {
  int64_t id;
  int queue;
  std::vector<GpuGrant> shares;
  int64_t end_ms;
};
struct SimRun {
  std::map<int64_t, int64_t> start_ms;
  std::map<int64_t, std::vector<GpuGrant>> gpus;
};

SimRun Simulate(QueueScheduler& s, const std::vector<Initial>& initial,
                const std::vector<SimJob>& jobs, int64_t until_ms, int64_t step_ms) {
  SimRun run;
  std::multimap<int64_t, int64_t> ends;
  std::map<int64_t, int64_t> duration;
  for (const Initial& i : initial) {
    s.AddRunning(i.id, i.queue, i.shares);
    ends.emplace(i.end_ms, i.id);
  }
  size_t next = 0;
  for (int64_t t = 0; t <= until_ms; t += step_ms) {
    while (!ends.empty() && ends.begin()->first <= t) {
      EXPECT_TRUE(s.Finish(ends.begin()->second));
      ends.erase(ends.begin());
    }
    for (; next < jobs.size() && jobs[next].submit_ms <= t; ++next) {
      const SimJob& j = jobs[next];
      EXPECT_TRUE(s.CheckFeasible(j.queue, j.request).ok());
      s.Enqueue({.id = j.id, .queue = j.queue, .request = j.request, .submitted_ms = t});
      duration[j.id] = j.duration_ms;
    }
    for (const StartDecision& d : s.Schedule(t)) {
      run.start_ms[d.id] = t;
      run.gpus[d.id] = d.gpus;
      ends.emplace(t + duration[d.id], d.id);
    }
  }
  return run;
}

// ---- Requests on each GPU model ----

TEST(QueueScheduler, TranslatesEachRequestKindPerModel) {
  auto s = Make({H100(0), A30(1)}, Queues({{"default", 1}}));
  // 10 GiB fits the A30, the smaller GPU: 10/24 of it.
  s->Enqueue({.id = 1, .queue = 0, .request = GpuRequest::Memory(10 * kGiB), .submitted_ms = 0});
  // 30 GiB only fits the H100: ceil(1000 * 30 GiB / 79.65 GiB) = 377 thousandths.
  s->Enqueue({.id = 2, .queue = 0, .request = GpuRequest::Memory(30 * kGiB), .submitted_ms = 0});
  // A quarter of the A30: 6 GiB of memory.
  s->Enqueue({.id = 3, .queue = 0, .request = GpuRequest::Fraction(250), .submitted_ms = 0});
  // A quarter of an H100, asked for by model: a quarter of its memory.
  s->Enqueue({.id = 4,
              .queue = 0,
              .request = GpuRequest::Fraction(250).OnModel("H100-80GB"),
              .submitted_ms = 0});
  auto d = s->Schedule(0);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(Find(d, 1).gpus, std::vector<GpuGrant>({{1, "GPU-a30-1", 417, 10 * kGiB}}));
  EXPECT_EQ(Find(d, 2).gpus, std::vector<GpuGrant>({{0, "GPU-h100-0", 377, 30 * kGiB}}));
  EXPECT_EQ(Find(d, 3).gpus, std::vector<GpuGrant>({{1, "GPU-a30-1", 250, 6 * kGiB}}));
  EXPECT_EQ(Find(d, 4).gpus, std::vector<GpuGrant>({{0, "GPU-h100-0", 250, kH100Memory / 4}}));
}

TEST(QueueScheduler, AWholeOnlyGpuNeverTakesAShare) {
  NodeGpu whole = H100(1);
  whole.mode = gpu::GpuMode::kWhole;
  auto s = Make({H100(0), whole}, Queues({{"default", 1}}));
  for (int64_t id = 1; id <= 3; ++id) {
    s->Enqueue({.id = id, .queue = 0, .request = GpuRequest::Fraction(500), .submitted_ms = id});
  }
  auto d = s->Schedule(0);
  ASSERT_EQ(d.size(), 2u) << "the third half must wait rather than share GPU 1";
  for (const StartDecision& start : d) EXPECT_EQ(start.gpus[0].index, 0);
  s->Enqueue({.id = 4, .queue = 0, .request = GpuRequest::Whole(1), .submitted_ms = 4});
  auto whole_start = s->Schedule(1);
  ASSERT_EQ(whole_start.size(), 1u);
  EXPECT_EQ(whole_start[0].id, 4);
  EXPECT_EQ(whole_start[0].gpus[0].index, 1);

  auto only_whole = Make({whole}, Queues({{"default", 1}}));
  Status shared = only_whole->CheckFeasible(0, GpuRequest::Memory(4 * kGiB));
  EXPECT_EQ(shared.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(shared.message(), "whole-GPU jobs only")) << shared;
  EXPECT_TRUE(only_whole->CheckFeasible(0, GpuRequest::Whole(1)).ok());
}

TEST(QueueScheduler, WholeGpusGetAllTheirMemoryOnTheSmallestModel) {
  auto s = Make({H100(0), A30(1)}, Queues({{"default", 1}}));
  s->Enqueue({.id = 1, .queue = 0, .request = GpuRequest::Whole(1), .submitted_ms = 0});
  s->Enqueue({.id = 2,
              .queue = 0,
              .request = GpuRequest::Whole(1).OnModel("h100-80gb"),
              .submitted_ms = 0});
  auto d = s->Schedule(0);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(Find(d, 1).gpus, std::vector<GpuGrant>({{1, "GPU-a30-1", 1000, kA30Memory}}));
  EXPECT_EQ(Find(d, 2).gpus, std::vector<GpuGrant>({{0, "GPU-h100-0", 1000, kH100Memory}}));
}

TEST(QueueScheduler, UsesTheLargerModelWhenTheSmallerIsFull) {
  auto s = Make({H100(0), A30(1)}, Queues({{"default", 1}}));
  s->AddRunning(100, 0, {Share(1, 900, 20 * kGiB)});
  s->Enqueue({.id = 1, .queue = 0, .request = GpuRequest::Memory(8 * kGiB), .submitted_ms = 0});
  auto d = s->Schedule(0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].gpus[0].index, 0);
  EXPECT_EQ(d[0].gpus[0].milli, 101u);  // ceil(1000 * 8 GiB / 79.65 GiB)
  ASSERT_TRUE(s->Finish(100));
  s->Enqueue({.id = 2, .queue = 0, .request = GpuRequest::Memory(8 * kGiB), .submitted_ms = 0});
  d = s->Schedule(0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].gpus[0].index, 1);
  EXPECT_EQ(d[0].gpus[0].milli, 334u);  // ceil(1000 * 8 / 24)
}

// ---- What CheckFeasible refuses ----

class Feasibility : public ::testing::Test {
 protected:
  std::unique_ptr<QueueScheduler> s_ =
      Make({H100(0), H100(1), A30(2)}, Queues({{"interactive", 0.25}, {"batch", 1}}));

  // The one-line message of a refusal with `code`.
  std::string Refusal(int queue, const GpuRequest& r,
                      StatusCode code = StatusCode::kInvalidArgument) {
    Status st = s_->CheckFeasible(queue, r);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_EQ(st.message().find('\n'), std::string::npos);
    return st.message();
  }
};

TEST_F(Feasibility, TooManyGpus) {
  EXPECT_EQ(Refusal(1, GpuRequest::Whole(4)),
            "--gpus 4 asks for 4 GPUs; this node has 2 H100-80GB and 1 A30-24GB");
  EXPECT_EQ(Refusal(1, GpuRequest::Whole(3)),
            "--gpus 3 asks for 3 GPUs of one model; this node has 2 H100-80GB and 1 A30-24GB");
  EXPECT_EQ(Refusal(1, GpuRequest::Whole(2).OnModel("A30-24GB")),
            "--gpus 2 --gpu-model A30-24GB asks for 2 GPUs; this node has 1 A30-24GB");
  EXPECT_TRUE(s_->CheckFeasible(1, GpuRequest::Whole(2)).ok());
}

TEST_F(Feasibility, TooMuchMemory) {
  EXPECT_EQ(Refusal(1, GpuRequest::Memory(100 * kGiB)),
            "--gpu-memory 100GiB is more than any GPU here has (largest: H100-80GB, 79.65 GiB)");
  EXPECT_EQ(Refusal(1, GpuRequest::Memory(30 * kGiB).OnModel("A30-24GB")),
            "--gpu-memory 30GiB --gpu-model A30-24GB is more than any GPU here has (largest: "
            "A30-24GB, 24 GiB)");
}

TEST_F(Feasibility, UnknownModel) {
  EXPECT_EQ(Refusal(1, GpuRequest::Fraction(500).OnModel("L4")),
            "--gpu-model L4: no such GPU here (H100-80GB, A30-24GB)");
}

TEST_F(Feasibility, LessThanTheCudaContext) {
  EXPECT_EQ(Refusal(1, GpuRequest::Memory(256 * kMiB)),
            "--gpu-memory 256MiB cannot hold even the CUDA context on H100-80GB (about 500 "
            "MiB); ask for more");
  EXPECT_TRUE(Contains(Refusal(1, GpuRequest::Fraction(5).OnModel("H100-80GB")),
                       "cannot hold even the CUDA context on H100-80GB (about 500 MiB); ask"));
  // 450 MiB holds an A30's context (400 MiB) but not an H100's: it may only run on the A30.
  EXPECT_TRUE(s_->CheckFeasible(1, GpuRequest::Memory(450 * kMiB)).ok());
  EXPECT_EQ(Refusal(1, GpuRequest::Memory(450 * kMiB).OnModel("H100-80GB")),
            "--gpu-memory 450MiB --gpu-model H100-80GB cannot hold even the CUDA context on "
            "H100-80GB (about 500 MiB); ask for more");
}

TEST_F(Feasibility, AboveTheQueuesQuota) {
  EXPECT_EQ(Refusal(0, GpuRequest::Whole(2)),
            "queue interactive's quota (0.25 of 3 GPUs) is less than --gpus 2");
  EXPECT_EQ(Refusal(0, GpuRequest::Whole(1)),
            "queue interactive's quota (0.25 of 3 GPUs) is less than --gpus 1");
  EXPECT_TRUE(s_->CheckFeasible(0, GpuRequest::Fraction(500)).ok());
  EXPECT_TRUE(s_->CheckFeasible(1, GpuRequest::Whole(2)).ok());
}

TEST_F(Feasibility, MigNeedsMigMode) {
  EXPECT_EQ(Refusal(1, GpuRequest::Mig("2g.20gb"), StatusCode::kFailedPrecondition),
            "--mig-profile 2g.20gb needs a GPU in MIG mode; no GPU on this node is");
}

TEST_F(Feasibility, UnknownQueue) {
  EXPECT_TRUE(Contains(Refusal(7, GpuRequest::Whole(1)), "no queue"));
}

TEST(QueueScheduler, CreateRefusesBadNodes) {
  auto dup = QueueScheduler::Create({H100(0), A30(0)}, Queues({{"q", 1}}));
  EXPECT_TRUE(Contains(dup.status().message(), "GPU index 0 appears twice"));
  auto policy = QueueScheduler::Create({H100(0)}, Queues({{"q", 1}}), {.policy = "nope"});
  EXPECT_EQ(policy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(policy.status().message(), "unknown policy"));
}

TEST(QueueScheduler, ANodeWithEveryGpuInMigModeHasNothingToScheduleHere) {
  auto s = QueueScheduler::Create({}, Queues({{"q", 1}}));
  ASSERT_TRUE(s.ok()) << s.status();
  Status feasible = (*s)->CheckFeasible(0, GpuRequest::Whole(1));
  EXPECT_EQ(feasible.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(feasible.message(), "MIG mode")) << feasible;
  EXPECT_TRUE((*s)->Schedule(0).empty());
  EXPECT_TRUE((*s)->Gpus().empty());
}

// ---- Queueing rules ----

TEST(QueueScheduler, HigherQueueGoesFirstEvenWhenSubmittedLater) {
  auto s = Make({H100(0)}, Queues({{"high", 1}, {"low", 1}}));
  s->AddRunning(100, 1, {Share(0, 1000, kH100Memory)});
  s->Enqueue({.id = 1, .queue = 1, .request = GpuRequest::Whole(1), .submitted_ms = 0});
  EXPECT_TRUE(s->Schedule(0).empty());
  s->Enqueue({.id = 2, .queue = 0, .request = GpuRequest::Whole(1), .submitted_ms = 10});
  EXPECT_TRUE(s->Schedule(10).empty());
  // The high job took over the low job's reservation.
  EXPECT_EQ(s->Gpus()[0].reserved_for, 2);
  ASSERT_TRUE(s->Finish(100));
  EXPECT_EQ(Ids(s->Schedule(20)), std::vector<int64_t>({2}));
  ASSERT_TRUE(s->Finish(2));
  EXPECT_EQ(Ids(s->Schedule(30)), std::vector<int64_t>({1}));
}

TEST(QueueScheduler, FirstInFirstOutWithinAQueue) {
  auto s = Make({H100(0)}, Queues({{"default", 1}}));
  for (int64_t id = 1; id <= 3; ++id) {
    s->Enqueue({.id = id, .queue = 0, .request = GpuRequest::Fraction(600), .submitted_ms = id});
  }
  // A smaller later job does not overtake job 2, which holds the only GPU's reservation.
  s->Enqueue({.id = 4, .queue = 0, .request = GpuRequest::Fraction(300), .submitted_ms = 4});
  std::vector<int64_t> order;
  for (int64_t t = 10; s->pending_count() > 0 && t < 100; t += 10) {
    for (const StartDecision& d : s->Schedule(t)) {
      order.push_back(d.id);
      if (d.id == 2) {
        EXPECT_EQ(s->WaitReason(4), "waiting for higher-priority work");
      }
    }
    if (!order.empty() && order.size() < 4) {
      EXPECT_EQ(s->WaitReason(order.back() + 1), "waiting for GPU 0 (reserved for it)");
      ASSERT_TRUE(s->Finish(order.back()));
    }
  }
  EXPECT_EQ(order, std::vector<int64_t>({1, 2, 3, 4}));
}

TEST(QueueScheduler, QuotaHoldsItsQueueBackButNotOthers) {
  // Queue a may use 0.6 of 4 GPUs = 2.4 GPUs.
  auto s = Make({H100(0), H100(1), H100(2), H100(3)}, Queues({{"a", 0.6}, {"b", 1}}));
  for (int64_t id = 1; id <= 3; ++id) {
    s->Enqueue({.id = id, .queue = 0, .request = GpuRequest::Whole(1), .submitted_ms = id});
  }
  // Would fit in a's quota (2.25 <= 2.4) and on a GPU, but job 3 is ahead of it.
  s->Enqueue({.id = 4, .queue = 0, .request = GpuRequest::Fraction(250), .submitted_ms = 4});
  s->Enqueue({.id = 5, .queue = 1, .request = GpuRequest::Fraction(500), .submitted_ms = 5});
  s->Enqueue({.id = 6, .queue = 1, .request = GpuRequest::Whole(1), .submitted_ms = 6});
  auto d = s->Schedule(10);
  std::vector<int64_t> ids = Ids(d);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, std::vector<int64_t>({1, 2, 5, 6}));
  EXPECT_EQ(s->Queues()[0].milli_in_use, 2000u);
  EXPECT_EQ(s->Queues()[0].quota_milli, 2400u);
  EXPECT_EQ(s->WaitReason(3), "queue a is at its quota (2 of 2.4 GPUs in use)");
  EXPECT_EQ(s->WaitReason(4),
            "behind job 3 in queue a, which is at its quota (2 of 2.4 GPUs in use)");
  // More b work still starts while a is held back.
  s->Enqueue({.id = 7, .queue = 1, .request = GpuRequest::Fraction(400), .submitted_ms = 7});
  EXPECT_EQ(Ids(s->Schedule(20)), std::vector<int64_t>({7}));
  ASSERT_TRUE(s->Finish(1));
  EXPECT_EQ(Ids(s->Schedule(30)), std::vector<int64_t>({3}));
  EXPECT_LE(s->Queues()[0].milli_in_use, s->Queues()[0].quota_milli);
}

// A later job of the same queue must not take the quota a blocked job will need once its GPU
// frees up; otherwise backfill would delay it after all.
TEST(QueueScheduler, BackfillLeavesTheBlockedJobItsQuota) {
  // Queue a may use 1 of 3 GPUs.
  auto s = Make({H100(0), H100(1), H100(2)}, Queues({{"a", 1.0 / 3}, {"b", 1}}));
  s->AddRunning(100, 1, {Share(0, 500, 10 * kGiB)});
  s->AddRunning(101, 0, {Share(1, 300, 10 * kGiB)});
  s->AddRunning(102, 1, {Share(1, 400, 10 * kGiB)});
  s->AddRunning(103, 1, {Share(2, 1000, kH100Memory)});
  s->Enqueue({.id = 1, .queue = 0, .request = GpuRequest::Fraction(700), .submitted_ms = 0});
  // Fits GPU 1 and, by itself, a's quota (0.5 of 1).
  s->Enqueue({.id = 2, .queue = 0, .request = GpuRequest::Fraction(200), .submitted_ms = 1});
  EXPECT_TRUE(s->Schedule(10).empty());
  EXPECT_EQ(s->WaitReason(1), "waiting for GPU 0 (reserved for it)");
  EXPECT_EQ(s->WaitReason(2),
            "queue a is at its quota (0.3 of 1 GPU in use, 0.7 kept for its jobs waiting for "
            "GPUs)");
  ASSERT_TRUE(s->Finish(100));
  EXPECT_EQ(Ids(s->Schedule(20)), std::vector<int64_t>({1}));
}

// A blocked high job with small low jobs behind it: they start on GPUs it cannot use, never on
// the GPU reserved for it, and it starts the moment that GPU's job ends, as without them.
TEST(QueueScheduler, BackfillNeverDelaysTheBlockedJob) {
  std::vector<Initial> initial = {
      {.id = 100, .queue = 1, .shares = {Share(0, 500, 20 * kGiB)}, .end_ms = 1000},
      {.id = 101, .queue = 1, .shares = {Share(1, 600, 20 * kGiB)}, .end_ms = 3000},
      {.id = 102, .queue = 1, .shares = {Share(2, 900, 20 * kGiB)}, .end_ms = 5000},
  };
  const SimJob head{.id = 1,
                    .queue = 0,
                    .request = GpuRequest::Fraction(750),
                    .submit_ms = 0,
                    .duration_ms = 1000};
  std::vector<SimJob> with_backfill = {head};
  for (int64_t id = 2; id <= 5; ++id) {
    with_backfill.push_back({.id = id,
                             .queue = 1,
                             .request = GpuRequest::Fraction(id == 3 ? 100 : 300),
                             .submit_ms = 0,
                             .duration_ms = 100'000});
  }

  auto alone = Make({H100(0), H100(1), H100(2)}, Queues({{"high", 1}, {"low", 1}}));
  SimRun a = Simulate(*alone, initial, {head}, 10'000, 10);
  auto busy = Make({H100(0), H100(1), H100(2)}, Queues({{"high", 1}, {"low", 1}}));
  SimRun b = Simulate(*busy, initial, with_backfill, 10'000, 10);

  ASSERT_TRUE(a.start_ms.contains(1));
  EXPECT_EQ(a.start_ms[1], 1000);  // The moment GPU 0's job ends.
  ASSERT_TRUE(b.start_ms.contains(1));
  EXPECT_EQ(b.start_ms[1], a.start_ms[1]);
  EXPECT_EQ(b.gpus[1][0].index, 0);
  // Backfill happened, on the GPUs the head could not use.
  ASSERT_TRUE(b.start_ms.contains(2));
  EXPECT_EQ(b.start_ms[2], 0);
  ASSERT_TRUE(b.start_ms.contains(3));
  EXPECT_EQ(b.start_ms[3], 0);
  for (const auto& [id, start] : b.start_ms) {
    if (id == 1 || start >= b.start_ms[1]) continue;
    EXPECT_NE(b.gpus[id][0].index, 0) << "job " << id << " took the head's reserved GPU";
  }
}

TEST(QueueScheduler, ReservationSticksWhenAnotherGpuLooksCloser) {
  auto s = Make({H100(0), H100(1)}, Queues({{"high", 1}, {"low", 1}}));
  s->AddRunning(100, 1, {Share(0, 500, 10 * kGiB)});
  s->AddRunning(101, 1, {Share(1, 300, 10 * kGiB)});
  s->AddRunning(102, 1, {Share(1, 300, 10 * kGiB)});
  s->Enqueue({.id = 1, .queue = 0, .request = GpuRequest::Fraction(750), .submitted_ms = 0});
  EXPECT_TRUE(s->Schedule(0).empty());
  EXPECT_EQ(s->Gpus()[0].reserved_for, 1);
  EXPECT_EQ(s->WaitReason(1), "waiting for GPU 0 (reserved for it)");
  // GPU 1 now has more free (0.7) than GPU 0 (0.5); the reservation stays where it is.
  ASSERT_TRUE(s->Finish(101));
  s->Enqueue({.id = 2, .queue = 1, .request = GpuRequest::Fraction(200), .submitted_ms = 1});
  auto d = s->Schedule(10);
  ASSERT_EQ(Ids(d), std::vector<int64_t>({2}));
  EXPECT_EQ(d[0].gpus[0].index, 1);
  EXPECT_EQ(s->Gpus()[0].reserved_for, 1);
  EXPECT_FALSE(s->Gpus()[1].reserved_for.has_value());
  ASSERT_TRUE(s->Finish(100));
  d = s->Schedule(20);
  ASSERT_EQ(Ids(d), std::vector<int64_t>({1}));
  EXPECT_EQ(d[0].gpus[0].index, 0);
}

// A whole-GPU job in a low queue behind a steady stream of high fraction jobs, which never
// leave the GPU empty: it starts once it has waited longer than starvation_ms, and only then.
TEST(QueueScheduler, StarvingJobGoesAheadOfEveryQueue) {
  std::vector<SimJob> jobs = {
      {.id = 1, .queue = 1, .request = GpuRequest::Whole(1), .submit_ms = 0, .duration_ms = 100}};
  for (int64_t t = 0, id = 2; t <= 5000; t += 100, ++id) {
    jobs.push_back({.id = id,
                    .queue = 0,
                    .request = GpuRequest::Fraction(300),
                    .submit_ms = t,
                    .duration_ms = 250});
  }
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const SimJob& a, const SimJob& b) { return a.submit_ms < b.submit_ms; });
  auto relieved = Make({H100(0)}, Queues({{"high", 1}, {"low", 1}}), {.starvation_ms = 1000});
  SimRun r = Simulate(*relieved, {}, jobs, 8000, 10);
  ASSERT_TRUE(r.start_ms.contains(1));
  EXPECT_GT(r.start_ms[1], 1000);
  EXPECT_LE(r.start_ms[1], 1000 + 250 + 10);

  auto strict = Make({H100(0)}, Queues({{"high", 1}, {"low", 1}}), {.starvation_ms = 3'600'000});
  SimRun s = Simulate(*strict, {}, jobs, 8000, 10);
  ASSERT_TRUE(s.start_ms.contains(1));
  EXPECT_GT(s.start_ms[1], 5000);  // Only once the stream ended.
}

// ---- Bookkeeping and views ----

// A GPU in MPS mode runs one user's jobs at a time: another user's share waits while it runs one
// (and goes to a time-sliced GPU when there is one), the same user's shares share it, and it
// serves whole-GPU jobs; an MPS share is one GPU.
TEST(QueueScheduler, AnMpsGpuRunsOneUsersJobsAtATime) {
  NodeGpu mps = H100(0);
  mps.mode = gpu::GpuMode::kMps;
  auto s = Make({mps}, Queues({{"q", 1.0}}));
  for (int64_t id : {1, 2}) {
    s->Enqueue({.id = id,
                .queue = 0,
                .request = GpuRequest::Fraction(250),
                .submitted_ms = id,
                .uid = 1000});
  }
  s->Enqueue(
      {.id = 3, .queue = 0, .request = GpuRequest::Fraction(250), .submitted_ms = 3, .uid = 1001});
  s->Enqueue(
      {.id = 4, .queue = 0, .request = GpuRequest::Fraction(250), .submitted_ms = 4, .uid = 1000});
  // User 1000's first two run side by side; user 1001's waits for the GPU, and (FIFO) so does
  // the job behind it.
  EXPECT_EQ(Ids(s->Schedule(10)), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(s->Finish(1));
  EXPECT_TRUE(s->Schedule(20).empty());  // job 2 of user 1000 still runs there
  EXPECT_TRUE(s->Finish(2));
  EXPECT_EQ(Ids(s->Schedule(30)), (std::vector<int64_t>{3}));
  EXPECT_TRUE(s->Schedule(40).empty());  // now user 1000's job 4 waits for user 1001's
  EXPECT_TRUE(s->Finish(3));
  EXPECT_EQ(Ids(s->Schedule(50)), (std::vector<int64_t>{4}));

  // Re-adopted after a restart, a running job keeps its user.
  auto again = Make({mps}, Queues({{"q", 1.0}}));
  again->AddRunning(7, 0, {Share(0, 250, 20 * kGiB)}, 1001);
  again->Enqueue(
      {.id = 8, .queue = 0, .request = GpuRequest::Fraction(250), .submitted_ms = 0, .uid = 1000});
  EXPECT_TRUE(again->Schedule(10).empty());

  // With a time-sliced GPU beside it, the other user's share goes there at once.
  NodeGpu shared = H100(1);
  auto two = Make({mps, shared}, Queues({{"q", 1.0}}));
  two->AddRunning(7, 0, {Share(0, 250, 20 * kGiB)}, 1001);
  two->Enqueue(
      {.id = 8, .queue = 0, .request = GpuRequest::Fraction(250), .submitted_ms = 0, .uid = 1000});
  StartDecision d = Find(two->Schedule(10), 8);
  ASSERT_EQ(d.gpus.size(), 1u);
  EXPECT_EQ(d.gpus[0].index, 1);

  // Whole GPUs are served; shares of two GPUs are not (a client reaches one daemon).
  auto whole = Make({mps}, Queues({{"q", 1.0}}));
  EXPECT_TRUE(whole->CheckFeasible(0, GpuRequest::Whole(1)).ok());
  NodeGpu mps2 = H100(1);
  mps2.mode = gpu::GpuMode::kMps;
  auto pair = Make({mps, mps2}, Queues({{"q", 1.0}}));
  GpuRequest two_shares = GpuRequest::Fraction(250);
  two_shares.gpus = 2;
  EXPECT_FALSE(pair->CheckFeasible(0, two_shares).ok());
  // Whole GPUs of a job are of one mode too, and the refusal says so.
  auto mixed = Make({mps, H100(1)}, Queues({{"q", 1.0}}));
  EXPECT_TRUE(Contains(mixed->CheckFeasible(0, GpuRequest::Whole(2)).message(),
                       "asks for 2 GPUs of one model and mode; this node has 1 H100-80GB in MPS "
                       "mode and 1 H100-80GB"));
}

TEST(QueueScheduler, RunningJobsQueuesAndGpuViews) {
  auto s = Make({H100(5), H100(3)}, Queues({{"a", 1}, {"b", 0.5}}));
  EXPECT_EQ(s->QueueIndex("b"), 1);
  EXPECT_EQ(s->QueueIndex("c"), std::nullopt);
  ASSERT_EQ(s->gpus().size(), 2u);
  EXPECT_EQ(s->gpus()[0].index, 3);

  s->AddRunning(7, 1, {Share(5, 250, 20 * kGiB)});
  auto gpus = s->Gpus();
  EXPECT_EQ(gpus[0].gpu.index, 3);
  EXPECT_EQ(gpus[0].allocated_milli, 0u);
  EXPECT_EQ(gpus[1].allocated_milli, 250u);
  EXPECT_EQ(gpus[1].allocated_memory, 20 * kGiB);
  EXPECT_EQ(gpus[1].jobs, std::vector<int64_t>({7}));
  auto queues = s->Queues();
  EXPECT_EQ(queues[1].name, "b");
  EXPECT_EQ(queues[1].running, 1u);
  EXPECT_EQ(queues[1].milli_in_use, 250u);
  EXPECT_EQ(queues[1].quota_milli, 1000u);
  EXPECT_EQ(queues[0].quota_milli, 2000u);

  s->Enqueue({.id = 8, .queue = 0, .request = GpuRequest::Whole(2), .submitted_ms = 0});
  EXPECT_EQ(s->pending_count(), 1u);
  EXPECT_EQ(s->Queues()[0].pending, 1u);
  EXPECT_TRUE(s->Schedule(0).empty());
  EXPECT_EQ(s->WaitReason(8), "waiting for GPUs 3, 5 (reserved for it)");
  EXPECT_EQ(s->Gpus()[0].reserved_for, 8);
  EXPECT_EQ(s->Gpus()[1].reserved_for, 8);

  EXPECT_TRUE(s->Finish(7));
  EXPECT_FALSE(s->Finish(7));
  EXPECT_EQ(s->Queues()[1].milli_in_use, 0u);
  auto d = s->Schedule(1);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].gpus, std::vector<GpuGrant>({{3, "GPU-h100-3", 1000, kH100Memory},
                                              {5, "GPU-h100-5", 1000, kH100Memory}}));
  EXPECT_EQ(s->pending_count(), 0u);
  EXPECT_EQ(s->WaitReason(8), "");
  EXPECT_FALSE(s->Dequeue(8));
  EXPECT_EQ(s->Queues()[0].running, 1u);
  EXPECT_EQ(s->Gpus()[1].jobs, std::vector<int64_t>({8}));

  s->Enqueue({.id = 9, .queue = 1, .request = GpuRequest::Fraction(100), .submitted_ms = 2});
  EXPECT_EQ(s->WaitReason(9), "waiting for higher-priority work");
  EXPECT_TRUE(s->Dequeue(9));
  EXPECT_FALSE(s->Dequeue(9));
  EXPECT_EQ(s->pending_count(), 0u);
  EXPECT_TRUE(s->Finish(8));
  EXPECT_EQ(s->Gpus()[0].allocated_milli, 0u);
  EXPECT_EQ(s->Gpus()[1].allocated_memory, 0u);
}

// ---- Randomized: thousands of submissions, ends and cancellations ----

class RandomizedInvariants : public ::testing::TestWithParam<std::string> {};

TEST_P(RandomizedInvariants, NothingOvercommittedAndEveryJobStarts) {
  std::vector<NodeGpu> node = {H100(0), H100(1), H100(2), A30(3)};
  QueueConfig config = Queues({{"high", 0.5}, {"mid", 0.75}, {"low", 1}});
  auto s = Make(node, config, {.policy = GetParam(), .starvation_ms = 20'000});
  std::mt19937_64 rng(7);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::map<int, const NodeGpu*> by_index;
  for (const NodeGpu& g : node) by_index[g.index] = &g;

  struct Held {
    int queue;
    std::vector<GpuGrant> shares;
  };
  std::map<int64_t, std::pair<int, GpuRequest>> pending;
  std::map<int64_t, Held> running;
  int64_t next_id = 1, now = 0;

  auto check_decision = [&](const StartDecision& d) {
    ASSERT_TRUE(pending.contains(d.id)) << "job " << d.id << " started but was not pending";
    auto [queue, r] = pending[d.id];
    ASSERT_FALSE(d.gpus.empty());
    const NodeGpu& first = *by_index.at(d.gpus[0].index);
    uint32_t want_count = r.kind == GpuRequest::Kind::kWholeGpus ? r.gpus : 1;
    ASSERT_EQ(d.gpus.size(), want_count);
    for (size_t i = 0; i < d.gpus.size(); ++i) {
      const GpuGrant& g = d.gpus[i];
      const NodeGpu& gpu = *by_index.at(g.index);
      if (i > 0) {
        EXPECT_LT(d.gpus[i - 1].index, g.index);
      }
      EXPECT_EQ(gpu.uuid, g.uuid);
      EXPECT_EQ(gpu.model, first.model) << "a multi-GPU job on two models";
      if (!r.gpu_model.empty()) {
        EXPECT_EQ(gpu.model, r.gpu_model);
      }
      switch (r.kind) {
        case GpuRequest::Kind::kWholeGpus:
          EXPECT_EQ(g.milli, 1000u);
          EXPECT_EQ(g.memory_bytes, gpu.memory_bytes);
          break;
        case GpuRequest::Kind::kFraction:
          EXPECT_EQ(g.milli, r.fraction_milli);
          EXPECT_EQ(g.memory_bytes, gpu.memory_bytes / 1000 * r.fraction_milli +
                                        gpu.memory_bytes % 1000 * r.fraction_milli / 1000);
          break;
        case GpuRequest::Kind::kMemory:
          EXPECT_EQ(g.memory_bytes, r.memory_bytes);
          EXPECT_GE(uint64_t{g.milli} * gpu.memory_bytes, r.memory_bytes * 1000);
          EXPECT_LT(uint64_t{g.milli - 1} * gpu.memory_bytes, r.memory_bytes * 1000);
          break;
        default:
          ADD_FAILURE() << "unexpected request kind";
      }
      EXPECT_GT(g.memory_bytes, gpu.context_bytes);
    }
    running[d.id] = {queue, d.gpus};
    pending.erase(d.id);
  };

  auto check_totals = [&] {
    std::map<int, std::pair<uint64_t, uint64_t>> used;  // index -> milli, memory
    std::vector<uint64_t> queue_milli(config.queues.size(), 0);
    for (const auto& [id, h] : running) {
      for (const GpuGrant& g : h.shares) {
        used[g.index].first += g.milli;
        used[g.index].second += g.memory_bytes;
        queue_milli[h.queue] += g.milli;
      }
    }
    for (const auto& v : s->Gpus()) {
      EXPECT_LE(used[v.gpu.index].first, 1000u) << "GPU " << v.gpu.index << " over-allocated";
      EXPECT_LE(used[v.gpu.index].second, v.gpu.memory_bytes);
      EXPECT_EQ(v.allocated_milli, used[v.gpu.index].first);
      EXPECT_EQ(v.allocated_memory, used[v.gpu.index].second);
    }
    auto queues = s->Queues();
    for (size_t q = 0; q < queues.size(); ++q) {
      EXPECT_LE(queue_milli[q], queues[q].quota_milli) << "queue " << queues[q].name;
      EXPECT_EQ(queues[q].milli_in_use, queue_milli[q]);
    }
    EXPECT_EQ(s->pending_count(), pending.size());
  };

  auto random_request = [&] {
    GpuRequest r;
    switch (uniform(0, 9)) {
      case 0:
      case 1:
        r = GpuRequest::Whole(static_cast<uint32_t>(uniform(1, 3)));
        break;
      case 2:
      case 3:
      case 4:
        r = GpuRequest::Memory(static_cast<uint64_t>(uniform(1, 70)) * kGiB);
        break;
      default:
        r = GpuRequest::Fraction(static_cast<uint32_t>(uniform(1, 9) * 100));
    }
    if (uniform(0, 9) == 0) r.gpu_model = uniform(0, 1) ? "A30-24GB" : "H100-80GB";
    return r;
  };

  for (int step = 0; step < 4000; ++step) {
    int64_t action = uniform(0, 99);
    if (action < 45) {
      int queue = static_cast<int>(uniform(0, 2));
      GpuRequest r = random_request();
      if (s->CheckFeasible(queue, r).ok()) {
        s->Enqueue({.id = next_id, .queue = queue, .request = r, .submitted_ms = now});
        pending[next_id] = {queue, r};
        ++next_id;
      }
    } else if (action < 85 && !running.empty()) {
      auto it = std::next(running.begin(), uniform(0, static_cast<int64_t>(running.size()) - 1));
      ASSERT_TRUE(s->Finish(it->first));
      running.erase(it);
    } else if (!pending.empty()) {
      auto it = std::next(pending.begin(), uniform(0, static_cast<int64_t>(pending.size()) - 1));
      ASSERT_TRUE(s->Dequeue(it->first));
      pending.erase(it);
    }
    now += uniform(0, 2000);
    for (const StartDecision& d : s->Schedule(now)) check_decision(d);
    check_totals();
    for (const auto& [id, p] : pending) ASSERT_FALSE(s->WaitReason(id).empty());
    if (HasFailure()) return;
  }
  // No more submissions: as running jobs end, every pending job starts.
  for (int round = 0; round < 100'000 && !(pending.empty() && running.empty()); ++round) {
    now += 1000;
    for (const StartDecision& d : s->Schedule(now)) check_decision(d);
    check_totals();
    if (HasFailure()) return;
    if (!running.empty()) {
      auto it = std::next(running.begin(), uniform(0, static_cast<int64_t>(running.size()) - 1));
      ASSERT_TRUE(s->Finish(it->first));
      running.erase(it);
    }
  }
  EXPECT_TRUE(pending.empty()) << pending.size() << " jobs never started";
  EXPECT_TRUE(running.empty());
}

INSTANTIATE_TEST_SUITE_P(Policies, RandomizedInvariants,
                         ::testing::Values("gpufrac", "fgd", "bestfit", "gpu-packing",
                                           "gpu-clustering", "dotprod", "random"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace gpufrac::node
