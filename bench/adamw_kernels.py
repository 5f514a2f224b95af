"""AdamW on the CPU for the weights of MiniLM-L6 (22.7 million, in its shapes): the for-each update, the fused kernel and
the per-tensor loop, timed alone, with gradient clipping and zeroing beside them (issue 83; docs/benchmarks.md).

    python bench/adamw_kernels.py
"""

from __future__ import annotations

import statistics
import time

import torch

SHAPES = [(30522, 384)] + [(384, 384)] * 24 + [(1536, 384)] * 6 + [(384, 1536)] * 6 + [(384,)] * 60 + [(1536,)] * 6


def weights() -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(*shape) * 0.02) for shape in SHAPES]
    for param in params:
        param.grad = torch.randn_like(param) * 1e-3
    return params


def median_ms(action: object, repeats: int = 10) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    kernels = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}
    for name, options in kernels.items():
        optimizer = torch.optim.AdamW(weights(), lr=5e-5, weight_decay=0.01, **options)
        for _ in range(3):
            optimizer.step()
        print(f"AdamW {name}: {median_ms(optimizer.step):.1f} ms a step")
    params = weights()
    print(f"clip_grad_norm_: {median_ms(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0)):.1f} ms")


if __name__ == "__main__":
    main()
