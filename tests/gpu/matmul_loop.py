#!/usr/bin/env python3
"""A GPU workload for the compute-share checks: PyTorch matmuls back to back for SECONDS, then
prints "iters_per_s=<rate>". With --train, a small MLP's training steps instead, printing
"step_ms=<median>". The matrices are --size (default $MATMUL_SIZE, else 4096) square. It starts
measuring after a warm-up and a file barrier (--start FILE: waits for the file to exist), so that
workloads started one after the other are measured together."""
import argparse
import os
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("seconds", type=float)
    p.add_argument("--size", type=int, default=int(os.environ.get("MATMUL_SIZE", "4096")))
    p.add_argument("--train", action="store_true")
    p.add_argument("--start", default="")
    a = p.parse_args()
    dev = torch.device("cuda")
    if a.train:
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 4096)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(512, 4096, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
    else:
        m = torch.randn(a.size, a.size, device=dev)

        def step():
            torch.mm(m, m)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    print("ready", flush=True)
    while a.start and not os.path.exists(a.start):
        time.sleep(0.01)
    times = []
    iters = 0
    t0 = time.perf_counter()
    end = t0 + a.seconds
    while time.perf_counter() < end:
        s = time.perf_counter()
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - s) / 10)
        iters += 10
    rate = iters / (time.perf_counter() - t0)
    if a.train:
        print(f"step_ms={statistics.median(times) * 1000:.3f}", flush=True)
    else:
        print(f"iters_per_s={rate:.1f}", flush=True)


if __name__ == "__main__":
    main()
