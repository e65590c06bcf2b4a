// Marks a function as part of a simulated library's public ABI. Both libraries are built with
// -fvisibility=hidden, so everything not marked with SIMGPU_EXPORT stays private.
#pragma once

#define SIMGPU_EXPORT __attribute__((visibility("default")))
