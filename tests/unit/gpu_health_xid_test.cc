// gpu/health's XID knowledge: which XIDs are application errors (as NVIDIA's k8s-device-plugin
// skips them) and the meanings shown in unhealthy reasons.
#include <gtest/gtest.h>

#include "gpu/health.h"

namespace gpufrac::gpu {
namespace {

TEST(GpuHealthXidTest, ApplicationXidsAreTheDevicePluginsList) {
  for (unsigned long long xid : {13, 31, 43, 45, 68, 109}) {
    EXPECT_TRUE(IsApplicationXid(xid)) << xid;
  }
  for (unsigned long long xid : {0, 48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 999}) {
    EXPECT_FALSE(IsApplicationXid(xid)) << xid;
  }
}

TEST(GpuHealthXidTest, WellKnownXidsHaveMeanings) {
  EXPECT_EQ("GPU has fallen off the bus", XidDescription(79));
  EXPECT_EQ("double-bit ECC error", XidDescription(48));
  EXPECT_EQ("graphics engine exception", XidDescription(13));
  EXPECT_EQ("", XidDescription(12345));
}

}  // namespace
}  // namespace gpufrac::gpu
