// The queue file: a good file gives the queues in priority order with their defaults and quotas;
// every mistake is one line naming the file and line.
#include <gtest/gtest.h>

#include "node/queue_config.h"

namespace gpufrac::node {
namespace {

std::string Error(const std::string& yaml) {
  StatusOr<QueueConfig> c = ParseQueueConfig(yaml, "queues.yaml");
  EXPECT_FALSE(c.ok()) << yaml;
  std::string message = c.ok() ? "" : c.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

TEST(QueueConfig, ReadsQueuesInPriorityOrder) {
  StatusOr<QueueConfig> c = ParseQueueConfig(R"(
version: 1
queues:
  - name: interactive
    default: {gpu-fraction: 0.25}
    quota: 0.5
  - name: batch
    default: {gpus: 2, gpu-model: H100-80GB}
  - name: scavenger
    compute: strict
)",
                                             "queues.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->queues.size(), 3u);
  EXPECT_EQ(c->queues[0].name, "interactive");
  EXPECT_EQ(c->queues[0].default_request.fraction_milli, 250u);
  EXPECT_DOUBLE_EQ(c->queues[0].quota, 0.5);
  EXPECT_EQ(c->queues[1].default_request.gpus, 2u);
  EXPECT_EQ(c->queues[1].default_request.gpu_model, "H100-80GB");
  EXPECT_DOUBLE_EQ(c->queues[1].quota, 1);
  EXPECT_EQ(c->queues[2].default_request, DefaultQueueConfig().queues[0].default_request);
  EXPECT_FALSE(c->queues[0].compute.has_value());  // the node's policy
  EXPECT_EQ(c->queues[2].compute, ComputePolicy::kStrict);
}

TEST(QueueConfig, MistakesNameTheFileAndLine) {
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    quota: 2\n"),
            "queues.yaml:4: quota of queue a must be a share of the node's GPUs in (0, 1], e.g. "
            "0.5");
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    qouta: 0.5\n"),
            "queues.yaml:4: unknown key \"qouta\" in a queue (allowed: compute, default, name, "
            "quota)");
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    compute: greedy\n"),
            "queues.yaml:4: compute of queue a must be fair, strict or off");
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n  - name: a\n"),
            "queues.yaml:4: queue a is defined twice");
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    default: {gpu-fraction: 1}\n"),
            "queues.yaml:4: default: --gpu-fraction 1 is a whole GPU; write --gpus 1");
  EXPECT_NE(Error("version: 2\nqueues: []\n").find("version must be 1"), std::string::npos);
  EXPECT_NE(Error("version: 1\nqueues: []\n").find("at least one queue"), std::string::npos);
  EXPECT_NE(Error("version: 1\nqueues:\n  - name: Big Queue\n").find("a queue needs a name"),
            std::string::npos);
  EXPECT_NE(Error("version: 1\nqueues: [\n").find("queues.yaml:"), std::string::npos);
  EXPECT_NE(Error("").find("expected a map"), std::string::npos);
  StatusOr<QueueConfig> missing = LoadQueueConfig("/nonexistent/queues.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/queues.yaml: cannot open"),
            std::string::npos);
}

// Found by tests/fuzz/fuzz_queue_yaml (corpus/queue_yaml/regression-key-is-a-list.yaml): a key
// that is a list or a map threw out of ParseQueueConfig and ended gpufracd.
TEST(QueueConfig, AKeyThatIsNotANameIsAnError) {
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    ? [default]\n    : {gpus: 1}\n"),
            "queues.yaml:4: a key in a queue must be a plain name");
  EXPECT_EQ(Error("{[version]: 1}"), "queues.yaml:1: a key in the top level must be a plain name");
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    default: {{gpus: 1}: 2}\n"),
            "queues.yaml:4: a key in default must be a plain name");
}

// Found while writing fuzz_queue_yaml: a field given as a list was dropped, so this queue's jobs
// ran on any GPU model.
TEST(QueueConfig, AFieldGivenAsAListOrAMapIsAnError) {
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    default: {gpus: 1, gpu-model: [A100]}\n"),
            "queues.yaml:4: default: gpu-model must be one value");
  EXPECT_EQ(Error("version: 1\nqueues:\n  - name: a\n    default:\n      gpus: {n: 1}\n"),
            "queues.yaml:5: default: gpus must be one value");
}

}  // namespace
}  // namespace gpufrac::node
