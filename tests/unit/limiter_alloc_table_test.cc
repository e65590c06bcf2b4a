// The allocation table: each handle gives back exactly its own charge, concurrently and at scale.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "limiter/alloc_table.h"

namespace gpufrac::limiter {
namespace {

TEST(AllocTableTest, TakeReturnsWhatInsertRecorded) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{1 << 10}}));
  EXPECT_TRUE(t.Insert(0x7f0000001000, ChargeRecord{4096, 3, 0}));
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
  ASSERT_TRUE(t.Init({{1 << 18}}));
  for (int round = 0; round < 3; ++round) {
    for (uint64_t i = 1; i <= 100000; ++i) ASSERT_TRUE(t.Insert(i << 12, ChargeRecord{i, 0, 0}));
    for (uint64_t i = 1; i <= 100000; ++i) {
      ChargeRecord c;
      ASSERT_TRUE(t.Take(i << 12, &c));
      ASSERT_EQ(c.bytes, i);
    }
  }
}

TEST(AllocTableTest, TakesEverythingAContextOwned) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{1 << 12}}));
  for (uint64_t i = 1; i <= 300; ++i) ASSERT_TRUE(t.Insert(i << 12, ChargeRecord{i, 0, i % 3}));
  uint64_t released = 0;
  int count = 0;
  t.TakeAllOwnedBy(1, [&](uint64_t, const ChargeRecord& c) {
    released += c.bytes;
    ++count;
  });
  EXPECT_EQ(count, 100);
  uint64_t expected = 0;
  for (uint64_t i = 1; i <= 300; ++i) expected += i % 3 == 1 ? i : 0;
  EXPECT_EQ(released, expected);
  ChargeRecord c;
  EXPECT_FALSE(t.Find(1 << 12, &c));  // owner 1: gone
  EXPECT_TRUE(t.Find(2 << 12, &c));   // owner 2: still there
}

TEST(AllocTableTest, MissesStayShortAfterMuchChurn) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{1 << 16}}));
  // Millions of short-lived entries leave tombstones everywhere; a lookup of an absent key must
  // still stop after the longest probe an insertion needed, not scan the table.
  for (uint64_t i = 1; i <= 2000000; ++i) {
    ASSERT_TRUE(t.Insert(i << 8, ChargeRecord{1, 0, 0}));
    ChargeRecord c;
    ASSERT_TRUE(t.Take(i << 8, &c));
  }
  EXPECT_LE(t.longest_probe(), 4u);  // not the 65536 slots a scan to an empty slot would take
  ChargeRecord c;
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_FALSE(t.Find((i << 40) | 0x1000, &c));
}

TEST(AllocTableTest, RefusesWhenFull) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{4}}));
  for (uint64_t i = 1; i <= 4; ++i) EXPECT_TRUE(t.Insert(i * 4096, ChargeRecord{1, 0, 0}));
  EXPECT_FALSE(t.Insert(99 * 4096, ChargeRecord{1, 0, 0}));
}

TEST(AllocTableTest, EntriesBeyondTheFirstPartGoToTheOverflow) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{1 << 10, 64}, {1 << 16}}));
  EXPECT_EQ(t.parts_used(), 1);
  // Five times what the first part holds, owned by two contexts.
  for (uint64_t i = 1; i <= 5000; ++i) ASSERT_TRUE(t.Insert(i << 12, ChargeRecord{i, 1, i % 2}));
  EXPECT_EQ(t.parts_used(), 2);
  EXPECT_LE(t.longest_probe(), 64u);  // the first part's lookups stay short
  ChargeRecord c;
  for (uint64_t i = 1; i <= 5000; i += 2) {
    ASSERT_TRUE(t.Take(i << 12, &c));
    ASSERT_EQ(c.bytes, i);
  }
  // Re-own the even ones to context 7 by taking and inserting them again, then destroy it: its
  // entries are found in both parts.
  for (uint64_t i = 2; i <= 5000; i += 2) {
    ASSERT_TRUE(t.Take(i << 12, &c));
    ASSERT_TRUE(t.Insert(i << 12, ChargeRecord{c.bytes, 1, 7}));
  }
  uint64_t released = 0;
  int count = 0;
  t.TakeAllOwnedBy(7, [&](uint64_t, const ChargeRecord& charge) {
    released += charge.bytes;
    ++count;
  });
  EXPECT_EQ(count, 2500);
  EXPECT_EQ(released, 2500u * 2501u);  // 2 + 4 + ... + 5000
  EXPECT_FALSE(t.Find(2 << 12, &c));
}

TEST(AllocTableTest, ThreePartsFillInOrderAndAreAllSearched) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{1 << 6, 8}, {1 << 10, 64}, {1 << 16}}));
  for (uint64_t i = 1; i <= 32; ++i) ASSERT_TRUE(t.Insert(i << 12, ChargeRecord{i, 0, i % 3}));
  EXPECT_EQ(t.parts_used(), 1);  // few live entries stay in the smallest part
  for (uint64_t i = 33; i <= 5000; ++i) ASSERT_TRUE(t.Insert(i << 12, ChargeRecord{i, 0, i % 3}));
  EXPECT_EQ(t.parts_used(), 3);
  EXPECT_LE(t.longest_probe(), 8u);  // lookups of the other parts' entries pass it quickly
  ChargeRecord c;
  for (uint64_t i = 1; i <= 5000; i += 2) {
    ASSERT_TRUE(t.Take(i << 12, &c));
    ASSERT_EQ(c.bytes, i);
  }
  uint64_t released = 0;
  t.TakeAllOwnedBy(2, [&](uint64_t key, const ChargeRecord& charge) {
    EXPECT_EQ(key >> 12, charge.bytes);
    released += charge.bytes;
  });
  uint64_t expected = 0;  // the even i in 2..5000 with i % 3 == 2
  for (uint64_t i = 2; i <= 5000; i += 2) expected += i % 3 == 2 ? i : 0;
  EXPECT_EQ(released, expected);
  EXPECT_FALSE(t.Find(2 << 12, &c));
  EXPECT_TRUE(t.Find(4 << 12, &c));
}

TEST(AllocTableTest, RefusesWhenBothPartsAreFull) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{4, 64}, {4}}));
  for (uint64_t i = 1; i <= 8; ++i) EXPECT_TRUE(t.Insert(i * 4096, ChargeRecord{1, 0, 0}));
  EXPECT_FALSE(t.Insert(99 * 4096, ChargeRecord{1, 0, 0}));
  ChargeRecord c;
  for (uint64_t i = 1; i <= 8; ++i) EXPECT_TRUE(t.Take(i * 4096, &c));
}

TEST(AllocTableTest, ConcurrentThreadsKeepTheirOwnEntries) {
  AllocTable t;
  ASSERT_TRUE(t.Init({{1 << 16}}));
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int round = 0; round < 200; ++round) {
        for (uint64_t i = 0; i < 100; ++i) {
          uint64_t key = (static_cast<uint64_t>(th + 1) << 32) | ((i + 1) << 8);
          if (!t.Insert(key, ChargeRecord{i + 1, th, 0})) errors++;
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
