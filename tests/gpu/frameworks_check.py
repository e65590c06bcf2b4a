#!/usr/bin/env python3
"""Runs inside `gpufrac exec` on a real GPU: checks that a framework sees the limit as the GPU's
total memory and that allocating past it raises the framework's own out-of-memory error.

usage: frameworks_check.py torch|cupy|jax LIMIT_BYTES
Prints key=value lines; exits 0 when both checks hold, 1 otherwise."""
import sys

framework, limit = sys.argv[1], int(sys.argv[2])
CHUNK = 256 << 20


def report(total, filled, oom_type, ok_total=None):
    if ok_total is None:
        ok_total = total == limit
    ok_fill = filled <= limit and oom_type is not None
    print(f"framework={framework} total={total} limit={limit} allocated_before_oom={filled} "
          f"oom_error={oom_type} total_ok={ok_total} oom_ok={ok_fill}")
    sys.exit(0 if ok_total and ok_fill else 1)


if framework == "torch":
    import torch
    total = torch.cuda.mem_get_info()[1]
    held, oom = [], None
    try:
        while True:
            held.append(torch.empty(CHUNK, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        oom = type(e).__name__
    report(total, len(held) * CHUNK, oom)
elif framework == "cupy":
    import cupy
    total = cupy.cuda.runtime.memGetInfo()[1]
    held, oom = [], None
    try:
        while True:
            held.append(cupy.empty(CHUNK, dtype=cupy.uint8))
    except cupy.cuda.memory.OutOfMemoryError as e:
        oom = type(e).__name__
    report(total, len(held) * CHUNK, oom)
elif framework == "jax":
    import os
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    stats = jax.devices()[0].memory_stats() or {}
    # XLA sizes its pool from what cuMemGetInfo reports: bytes_limit must fit in the limit.
    total = stats.get("bytes_limit", 0)
    held, oom = [], None
    try:
        while True:
            x = jnp.ones((CHUNK,), dtype=jnp.uint8)
            x.block_until_ready()
            held.append(x)
    except Exception as e:  # XlaRuntimeError: RESOURCE_EXHAUSTED
        if "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower():
            oom = type(e).__name__
        else:
            raise
    report(total, len(held) * CHUNK, oom, ok_total=0 < total <= limit)
else:
    sys.exit(f"unknown framework {framework}")
