#!/usr/bin/env python3
"""Runs inside `gpufrac exec` on a real GPU: checks that a framework sees the limit as the GPU's
total memory and that allocating past it raises the framework's own out-of-memory error.

usage: frameworks_check.py torch|cupy|jax|jax-platform LIMIT_BYTES
Prints one key=value line; exits 0 when both checks hold, 1 otherwise. With
GPUFRAC_CHECK_HOLD_FILE set, it keeps what it allocated after printing, until that file exists
(at most 300 s, or until that file's directory is removed), so that memory can be measured from
outside the workload meanwhile.

jax uses XLA's default pool, which takes XLA_PYTHON_CLIENT_MEM_FRACTION (0.75) of the total the
driver reports: its total check is that the pool is that share of the limit, and its
out-of-memory error comes from the pool. jax-platform makes XLA allocate each array from the
driver (XLA_PYTHON_CLIENT_ALLOCATOR=platform), so the error comes from the limiter."""
import os
import sys
import time

framework, limit = sys.argv[1], int(sys.argv[2])
CHUNK = 256 << 20


def report(total, expected_total, filled, oom_type, held_from_driver):
    """expected_total None: the framework reports no total to check (printed as n/a).
    held_from_driver: what the framework's allocator holds from the driver (its cache or pool
    included), for physical_use.sh to tell it apart from the context and loaded kernels."""
    ok_total = expected_total is None or total == expected_total
    ok_fill = filled <= limit  # fill() returns only once the framework raised its error
    print(f"framework={framework} pid={os.getpid()} total={total} expected_total={expected_total} "
          f"limit={limit} allocated_before_oom={filled} oom_error={oom_type} "
          f"total_ok={'n/a' if expected_total is None else ok_total} "
          f"held_from_driver={held_from_driver} oom_ok={ok_fill}", flush=True)
    hold = os.environ.get("GPUFRAC_CHECK_HOLD_FILE")
    deadline = time.time() + 300
    while (hold and not os.path.exists(hold) and os.path.isdir(os.path.dirname(hold))
           and time.time() < deadline):
        time.sleep(0.1)
    sys.exit(0 if ok_total and ok_fill else 1)


def fill(allocate, oom_type, is_oom=lambda e: True):
    """Allocates CHUNK after CHUNK until the framework raises its out-of-memory error."""
    held = []
    try:
        while True:
            held.append(allocate())
    except oom_type as e:
        if not is_oom(e):
            raise
        return held, type(e).__name__


if framework == "torch":
    import torch
    total = torch.cuda.mem_get_info()[1]
    # A training step of a small convolutional network, in fp32 and bf16, loads the cuBLAS and
    # cuDNN kernels a real workload has in its context before it fills the rest.
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.Flatten(),
                        nn.Linear(64 * 60 * 60, 10)).cuda()
    images = torch.randn(32, 3, 64, 64, device="cuda")
    for bf16 in (False, True):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = net(images).square().mean()
        loss.backward()
    torch.cuda.synchronize()
    held, oom = fill(lambda: torch.empty(CHUNK, dtype=torch.uint8, device="cuda"),
                     torch.cuda.OutOfMemoryError)
    report(total, limit, len(held) * CHUNK, oom, torch.cuda.memory_reserved())
elif framework == "cupy":
    import cupy
    total = cupy.cuda.runtime.memGetInfo()[1]
    held, oom = fill(lambda: cupy.empty(CHUNK, dtype=cupy.uint8), cupy.cuda.memory.OutOfMemoryError)
    report(total, limit, len(held) * CHUNK, oom, cupy.get_default_memory_pool().total_bytes())
elif framework in ("jax", "jax-platform"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if framework == "jax-platform":
        os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"] = "platform"
    import jax
    import jax.numpy as jnp
    stats = jax.devices()[0].memory_stats() or {}
    total = stats.get("bytes_limit", 0)
    if framework == "jax":
        fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
        expected = int(limit * fraction)
    else:
        expected = None  # the platform allocator has no pool, so XLA reports no total
    def allocate():
        x = jnp.ones((CHUNK,), dtype=jnp.uint8)
        x.block_until_ready()
        return x
    held, oom = fill(allocate, jax.errors.JaxRuntimeError,
                     lambda e: "RESOURCE_EXHAUSTED" in str(e))
    stats = jax.devices()[0].memory_stats() or {}
    report(total, expected, len(held) * CHUNK, oom,
           stats.get("pool_bytes", stats.get("bytes_in_use", len(held) * CHUNK)))
else:
    sys.exit(f"unknown framework {framework}")
