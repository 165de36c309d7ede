#!/usr/bin/env python3
"""Times flash-linear-attention's (FLA's) HGRN ops, the public library's closest op to the RG-LRU
(a diagonal gated recurrence h_t = exp(g_t) h_{t-1} + x_t; FLA has no Hawk), for scale beside
kernels/rglru/cuda (docs/PERFORMANCE.md). FLA is exported untracked into .fla/fla (commit bc3b101,
see bench/fla_deltanet_bench.py) and carried to the GPU machine; this file only calls it:
    fla.ops.hgrn.chunk.chunk_hgrn(x, g, initial_state=None, output_final_state=False)
    fla.ops.hgrn.fused_recurrent.fused_recurrent_hgrn(x, g, initial_state=None,
                                                      output_final_state=False, ...)
x and g are [B, T, D]; g is the log decay. Forward and forward+backward, bf16, median of 50 runs
(CUDA events) after 10 warm-up runs; prints FLA_HGRN lines.
Usage (repo root, CUDA machine): PYTHONPATH=.fla python3 bench/fla_hgrn_bench.py
"""
import statistics
import sys

import torch


def median_ms(fn, warmup=10, reps=50):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    from fla.ops.hgrn.chunk import chunk_hgrn
    from fla.ops.hgrn.fused_recurrent import fused_recurrent_hgrn
    torch.manual_seed(0)
    for b, t, d in ((8, 2048, 960), (1, 32768, 960)):
        x = torch.randn(b, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = torch.nn.functional.logsigmoid(torch.randn(b, t, d, device="cuda")).to(
            torch.bfloat16).requires_grad_(True)
        do = torch.randn(b, t, d, device="cuda", dtype=torch.bfloat16)
        for name, op in (("chunk", chunk_hgrn), ("fused_recurrent", fused_recurrent_hgrn)):
            try:
                fwd = median_ms(lambda: op(x, g)[0])

                def fwd_bwd():
                    o = op(x, g)[0]
                    torch.autograd.backward(o, do)
                both = median_ms(fwd_bwd)
                print(f"FLA_HGRN {name} B={b} T={t} D={d} fwd {fwd:.3f} ms fwd+bwd {both:.3f} ms "
                      f"per token {both * 1e6 / (b * t):.2f} ns", flush=True)
            except Exception as e:  # report and go on with the next op
                print(f"FLA_HGRN {name} B={b} T={t} D={d} error={type(e).__name__}: {e}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
