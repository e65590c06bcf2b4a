// cuGetProcAddress's variant choice, as the limiter reproduces it when a driver answers with an
// address it cannot match to an exported function.
#include <gtest/gtest.h>

#include "limiter/proc_address.h"

namespace gpufrac::limiter {
namespace {

const Variant kVariants[] = {
    {"cuMemAlloc_v2", 3020},     {"cuMemAllocAsync", 11020},     {"cuMemAllocAsync_ptsz", 11020},
    {"cuCtxCreate_v2", 3020},    {"cuCtxCreate_v3", 11040},      {"cuCtxCreate_v4", 12050},
    {"cuGetProcAddress", 11030}, {"cuGetProcAddress_v2", 12000}, {"nvmlDeviceGetMemoryInfo", 0},
};
constexpr int kCount = sizeof(kVariants) / sizeof(kVariants[0]);

const char* Choose(const char* base, int version, bool per_thread = false) {
  int i = ChooseVariant(kVariants, kCount, base, version, per_thread);
  return i < 0 ? "none" : kVariants[i].symbol;
}

TEST(ProcAddressTest, TheNewestVariantTheCallersVersionKnows) {
  EXPECT_STREQ(Choose("cuMemAlloc", 12000), "cuMemAlloc_v2");
  EXPECT_STREQ(Choose("cuMemAlloc", 3000), "none");  // v1: the driver's own, left alone
  EXPECT_STREQ(Choose("cuCtxCreate", 11000), "cuCtxCreate_v2");
  EXPECT_STREQ(Choose("cuCtxCreate", 12000), "cuCtxCreate_v3");
  EXPECT_STREQ(Choose("cuCtxCreate", 13000), "cuCtxCreate_v4");
  EXPECT_STREQ(Choose("cuGetProcAddress", 11080), "cuGetProcAddress");
  EXPECT_STREQ(Choose("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
  EXPECT_STREQ(Choose("cuMemAllocAsync", 11000), "none");  // too new for the caller
}

TEST(ProcAddressTest, PerThreadStreamVariantsOnlyWhereTheyExist) {
  EXPECT_STREQ(Choose("cuMemAllocAsync", 12000, true), "cuMemAllocAsync_ptsz");
  EXPECT_STREQ(Choose("cuMemAllocAsync", 12000, false), "cuMemAllocAsync");
  EXPECT_STREQ(Choose("cuMemAlloc", 12000, true), "cuMemAlloc_v2");
}

TEST(ProcAddressTest, OnlyExactBaseNamesMatch) {
  EXPECT_STREQ(Choose("cuMemAllocA", 12000), "none");
  EXPECT_STREQ(Choose("cuMemAlloc_v2", 12000), "none");  // callers pass base names
  EXPECT_STREQ(Choose("cuMem", 12000), "none");
  EXPECT_STREQ(Choose("cuMemAllocPitch", 12000), "none");
}

}  // namespace
}  // namespace gpufrac::limiter
