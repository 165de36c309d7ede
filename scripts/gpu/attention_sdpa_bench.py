"""PyTorch's attention on one GPU, the public reference for kernels/attention (docs/PERFORMANCE.md).

Times torch.nn.functional.scaled_dot_product_attention (causal; whatever backend PyTorch picks,
printed) and, if it compiles, torch.nn.attention.flex_attention with a sliding-window mask (B8 T2048 only), at
bf16 B8 T2048 H16 D128 and the long-context shapes of the attention benchmark; forward and
forward+backward, CUDA events, median of many repetitions. Never fails the run: a missing
PyTorch or a failed compile is a printed note.
Usage (GPU machine): python3 scripts/gpu/attention_sdpa_bench.py [--reps 30] [--long]
"""
import argparse
import statistics
import sys


def median_ms(fn, reps):
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def time_op(attn, q, k, v, do, reps):
    """Median ms of the forward (no grad) and of forward + backward of o = attn(q, k, v)."""
    import torch

    def fwd_bwd():
        torch.autograd.grad(attn(q, k, v), (q, k, v), do)

    with torch.no_grad():
        f_ms = median_ms(lambda: attn(q, k, v), reps)
    return f_ms, median_ms(fwd_bwd, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--long", action="store_true", help="also B2 T8192 and B1 T32768")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except Exception as exc:  # noqa: BLE001
        print("note: PyTorch does not import:", exc)
        return 0
    print("torch", torch.__version__, "device", torch.cuda.get_device_name(0))
    shapes = [(8, 2048, 16, 128)] + ([(2, 8192, 16, 128), (1, 32768, 16, 128)] if args.long else [])
    for (B, T, H, D) in shapes:
        torch.manual_seed(0)
        q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_(True)

        f_ms, fb_ms = time_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                              q, k, v, do, args.reps)
        print(f"RESULT sdpa causal B{B} T{T} H{H} D{D} bf16 | fwd {f_ms:.3f} ms | fwd+bwd {fb_ms:.3f} ms")
        if T != 2048:  # flex attention (a compile per shape) at the shape only
            continue
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            window = 1024

            def swa(b, h, qi, ki):
                return (ki <= qi) & (qi - ki < window)

            mask = create_block_mask(swa, B=None, H=None, Q_LEN=T, KV_LEN=T, device="cuda")
            flex = torch.compile(flex_attention)
            ff_ms, ffb_ms = time_op(lambda q, k, v: flex(q, k, v, block_mask=mask), q, k, v, do, args.reps)
            print(f"RESULT flex window {window} B{B} T{T} H{H} D{D} bf16 | fwd {ff_ms:.3f} ms | "
                  f"fwd+bwd {ffb_ms:.3f} ms")
        except Exception as exc:  # noqa: BLE001
            print("note: flex attention failed:", type(exc).__name__, str(exc).splitlines()[0][:200])
        del q, k, v, do
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
