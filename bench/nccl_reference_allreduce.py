#!/usr/bin/env python3
"""NCCL's own all-reduce bus bandwidth, measured without our code, as the reference for ours.

nccl-tests' all_reduce_perf is not installed on the GPU machines and nothing can be downloaded
there, but PyTorch is, and torch.distributed's NCCL backend calls ncclAllReduce directly. This
measures it the way all_reduce_perf and bench/nccl_allreduce_bench.cc do: float32 sum, in
place, `iters` collectives queued back to back and timed together after `warmup` untimed ones;
busbw = algbw * 2 (N - 1) / N. One process per GPU on this machine.

Usage: python3 nccl_reference_allreduce.py [--gpus 2] [--iters 20] [--warmup 5]
                                           [--min_bytes 1048576] [--max_bytes 1073741824]
Prints per size, from rank 0:
  RESULT torch_nccl_allreduce bytes=... ranks=N time_us=... algbw_GBs=... busbw_GBs=...
"""
import argparse
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, args, port):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.gpus)
    n = dist.get_world_size()
    bus_factor = 2.0 * (n - 1) / n if n > 1 else 1.0
    buf = torch.zeros(args.max_bytes // 4, dtype=torch.float32, device="cuda")
    size = args.min_bytes
    while size <= args.max_bytes:
        view = buf[: size // 4]
        for _ in range(args.warmup):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / args.iters
        if rank == 0:
            algbw = size / seconds / 1e9
            print(f"RESULT torch_nccl_allreduce bytes={size} ranks={n} time_us={seconds * 1e6:.1f} "
                  f"algbw_GBs={algbw:.2f} busbw_GBs={algbw * bus_factor:.2f}", flush=True)
        size *= 2
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--min_bytes", type=int, default=1 << 20)
    parser.add_argument("--max_bytes", type=int, default=1 << 30)
    args = parser.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"nccl_reference_allreduce: PyTorch is not available ({e})", file=sys.stderr)
        return 2
    if torch.cuda.device_count() < args.gpus:
        print(f"nccl_reference_allreduce: {args.gpus} GPUs needed, "
              f"{torch.cuda.device_count()} visible", file=sys.stderr)
        return 2
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    mp.spawn(run, args=(args, free_port()), nprocs=args.gpus, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
