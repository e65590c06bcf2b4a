// The allocation table: each handle gives back exactly its own charge, concurrently and at scale.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "limiter/alloc_table.h"

namespace gpufrac::limiter {
namespace {

TEST(AllocTableTest, TakeReturnsWhatInsertRecorded) {
  AllocTable t;
  ASSERT_TRUE(t.Init(1 << 10));
  EXPECT_TRUE(t.Insert(0x7f0000001000, ChargeRecord{4096, 3}));
  ChargeRecord c;
  EXPECT_TRUE(t.Find(0x7f0000001000, &c));
  EXPECT_TRUE(t.Take(0x7f0000001000, &c));
  EXPECT_EQ(c.bytes, 4096u);
  EXPECT_EQ(c.gpu, 3);
  EXPECT_FALSE(t.Take(0x7f0000001000, &c));  // a second free releases nothing
  EXPECT_FALSE(t.Find(0x7f0000001000, &c));
}

TEST(AllocTableTest, HoldsManyLiveEntriesAndReusesFreedSlots) {
  AllocTable t;
  ASSERT_TRUE(t.Init(1 << 18));
  for (int round = 0; round < 3; ++round) {
    for (uint64_t i = 1; i <= 100000; ++i) ASSERT_TRUE(t.Insert(i << 12, ChargeRecord{i, 0}));
    for (uint64_t i = 1; i <= 100000; ++i) {
      ChargeRecord c;
      ASSERT_TRUE(t.Take(i << 12, &c));
      ASSERT_EQ(c.bytes, i);
    }
  }
}

TEST(AllocTableTest, RefusesWhenFull) {
  AllocTable t;
  ASSERT_TRUE(t.Init(4));
  for (uint64_t i = 1; i <= 4; ++i) EXPECT_TRUE(t.Insert(i * 4096, ChargeRecord{1, 0}));
  EXPECT_FALSE(t.Insert(99 * 4096, ChargeRecord{1, 0}));
}

TEST(AllocTableTest, ConcurrentThreadsKeepTheirOwnEntries) {
  AllocTable t;
  ASSERT_TRUE(t.Init(1 << 16));
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int round = 0; round < 200; ++round) {
        for (uint64_t i = 0; i < 100; ++i) {
          uint64_t key = (static_cast<uint64_t>(th + 1) << 32) | ((i + 1) << 8);
          if (!t.Insert(key, ChargeRecord{i + 1, th})) errors++;
        }
        for (uint64_t i = 0; i < 100; ++i) {
          uint64_t key = (static_cast<uint64_t>(th + 1) << 32) | ((i + 1) << 8);
          ChargeRecord c;
          if (!t.Take(key, &c) || c.bytes != i + 1 || c.gpu != th) errors++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
}

}  // namespace
}  // namespace gpufrac::limiter
