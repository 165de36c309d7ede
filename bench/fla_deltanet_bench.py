#!/usr/bin/env python3
"""Times flash-linear-attention's (FLA's) DeltaNet and Gated DeltaNet chunk ops, the public
reference for our delta-rule kernels (kernels/deltanet/README.md).

FLA is not vendored: it is exported, untracked, into .fla/fla (git-ignored) from
    github.com/fla-org/flash-linear-attention
    commit bc3b101dcb713ddc5bd8924b66754eb68b5ccf89 (2026-08-22, fla.__version__ 0.5.2)
with
    git --git-dir=<mirror> archive bc3b101dcb713ddc5bd8924b66754eb68b5ccf89 fla | tar -x -C .fla
and travels to the GPU machine as an ignored path (run's carry: [".fla"]). This file only calls it.

The two functions used, with their signatures at that commit:
    fla.ops.delta_rule.chunk.chunk_delta_rule(
        q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
        use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs)
    fla.ops.gated_delta_rule.chunk.chunk_gated_delta_rule(
        q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
        use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
        state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
        cp_context=None, **kwargs)
Both return (o, final_state). Layout is [B, T, H, D] (head_first was removed; passing it raises);
beta and g are [B, T, H]; g is the per-token log decay (log space); states are [N, H, K, V]
(key rows), i.e. the transpose of our [S, H, D, D] (value rows) unless state_v_first=True.
The recurrence (fla/ops/gated_delta_rule/naive.py) is ours:
    S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,   o_t = scale * S_t q_t
so scale=1.0 matches our op, which has no scale. bf16 only for the delta rule (float32 asserts).

Import: `import fla` pulls fla.layers / fla.models (transformers) and fla/ops/__init__.py imports
every op, and fla.modules/__init__.py and gated_delta_rule/naive.py import einops at module
level; the chunk kernels themselves need only torch, triton and packaging. If the normal import
fails (e.g. no einops, or a transformers incompatibility), the package __init__ files of fla,
fla.ops, fla.modules, fla.ops.delta_rule and fla.ops.gated_delta_rule are replaced by empty
package stubs and the two chunk modules are imported directly (48 fla modules, no einops).

On Hopper with Triton >= 3.4 and < 3.7.1 FLA's gated backward (common/chunk_o.py,
chunk_bwd_dqkwg with g) raises RuntimeError (FLA issue #640) unless tilelang is installed (its
TileLang backend is then used) or flash_qla is installed (FlashQLA backend for the whole op).
Errors are caught per (op, mode) and printed as `error=...`.

Usage (repo root, on a CUDA machine):
  PYTHONPATH=.fla python3 bench/fla_deltanet_bench.py [--B 8 --T 2048 --H 16 --D 128]
      [--warmup 10 --reps 50] [--ops deltanet,gated_deltanet] [--modes fwd,fwdbwd]
      [--qk_l2norm pre|kernel] [--dump DIR]
Prints:
  FLA_INFO ...                                    versions, device, import path, backends
  FLA_RESULT op=deltanet mode=fwd ms=<median> min_ms=.. mean_ms=.. reps=.. shape=BxTxHxD
  FLA_RESULT op=gated_deltanet mode=fwdbwd error=<one line>           when the op raised
  FLA_CHECK op=.. tensor=.. rel_err=..            with --dump: FLA vs a float64 recurrence
"""
import argparse
import importlib
import json
import os
import statistics
import sys
import time
import traceback
import types

FLA_COMMIT = "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLA_ROOT = os.path.join(REPO, ".fla")

# Package __init__ files skipped by the fallback import (see the module docstring).
_STUB_PACKAGES = ("fla", "fla.ops", "fla.modules", "fla.ops.delta_rule", "fla.ops.gated_delta_rule")


def one_line(exc):
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("\r", " ")
    return " ".join(text.split())[:400]


def _fla_version():
    try:
        with open(os.path.join(FLA_ROOT, "fla", "__init__.py")) as f:
            for line in f:
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("\"'")
    except OSError:
        pass
    return "0"


def _purge_fla():
    for name in list(sys.modules):
        if name == "fla" or name.startswith("fla."):
            del sys.modules[name]


def import_fla():
    """Returns (chunk_delta_rule, chunk_gated_delta_rule, how), how = 'package' or 'stubbed'."""
    if os.path.isdir(os.path.join(FLA_ROOT, "fla")) and FLA_ROOT not in sys.path:
        sys.path.insert(0, FLA_ROOT)
    try:
        from fla.ops.delta_rule import chunk_delta_rule
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        return chunk_delta_rule, chunk_gated_delta_rule, "package"
    except Exception as exc:  # noqa: BLE001 - any failure of the optional parts
        print(f"FLA_INFO normal_import_failed={one_line(exc)}", flush=True)
    _purge_fla()
    base = None
    for p in sys.path:
        if os.path.isfile(os.path.join(p or ".", "fla", "ops", "delta_rule", "chunk.py")):
            base = os.path.abspath(os.path.join(p or ".", "fla"))
            break
    if base is None:
        raise ImportError("no fla/ops/delta_rule/chunk.py on sys.path (export FLA into .fla/fla)")
    for name in _STUB_PACKAGES:
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(base, *name.split(".")[1:])]
        mod.__package__ = name
        if name == "fla":
            mod.__version__ = _fla_version()
        sys.modules[name] = mod
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(sys.modules[parent], child, mod)
    dr = importlib.import_module("fla.ops.delta_rule.chunk")
    gdr = importlib.import_module("fla.ops.gated_delta_rule.chunk")
    return dr.chunk_delta_rule, gdr.chunk_gated_delta_rule, "stubbed"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--T", type=int, default=2048)
    p.add_argument("--H", type=int, default=16)
    p.add_argument("--D", type=int, default=128)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--ops", default="deltanet,gated_deltanet")
    p.add_argument("--modes", default="fwd,fwdbwd")
    p.add_argument("--qk_l2norm", choices=("pre", "kernel"), default="pre",
                   help="pre: q, k are L2-normalised before the op, outside the timing, "
                   "use_qk_l2norm_in_kernel=False (like our op); kernel: FLA normalises inside")
    p.add_argument("--g_dtype", choices=("float32", "bfloat16"), default="float32",
                   help="dtype of g (FLA's GatedDeltaNet layer computes it in float32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dump", default="",
                   help="directory: save inputs, FLA outputs and gradients at B=1 T=256 H=2 D=128 "
                   "(safetensors, else torch.save) and check them against a float64 recurrence")
    args = p.parse_args()
    for op in args.ops.split(","):
        if op and op not in ("deltanet", "gated_deltanet"):
            p.error(f"--ops: unknown op {op!r} (deltanet, gated_deltanet)")
    for mode in args.modes.split(","):
        if mode and mode not in ("fwd", "fwdbwd"):
            p.error(f"--modes: unknown mode {mode!r} (fwd, fwdbwd)")
    return args


def make_inputs(torch, op, B, T, H, D, seed, device, qk_l2norm, g_dtype, with_states=False):
    """Inputs drawn in float32 on the CPU from `seed` (same on every machine), then cast."""
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(seed)
    bf16 = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float32)

    q, k, v = randn(B, T, H, D), randn(B, T, H, D), randn(B, T, H, D)
    if qk_l2norm == "pre":
        q, k = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)
    beta = torch.sigmoid(randn(B, T, H))
    g = F.logsigmoid(randn(B, T, H))
    do = randn(B, T, H, D)
    x = {"q": q.to(bf16), "k": k.to(bf16), "v": v.to(bf16), "beta": beta.to(bf16),
         "do": do.to(bf16)}
    if op == "gated_deltanet":
        x["g"] = g.to(getattr(torch, g_dtype))
    if with_states:
        x["h0"] = (0.1 * randn(B, H, D, D)).to(torch.float32)  # [N, H, K, V]
        x["dht"] = (0.1 * randn(B, H, D, D)).to(torch.float32)
    return {name: t.to(device).contiguous() for name, t in x.items()}


def grad_names(op):
    return ["q", "k", "v", "beta"] + (["g"] if op == "gated_deltanet" else [])


def call_op(fns, op, x, qk_l2norm, with_states=False):
    chunk_delta_rule, chunk_gated_delta_rule = fns
    kw = dict(scale=1.0, use_qk_l2norm_in_kernel=(qk_l2norm == "kernel"))
    if with_states:
        kw.update(initial_state=x["h0"], output_final_state=True)
    if op == "deltanet":
        return chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"], **kw)
    return chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], **kw)


def time_cuda(torch, fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in events]
    return statistics.median(ms), min(ms), statistics.fmean(ms)


def bench(torch, fns, args):
    dev = "cuda"
    for op in [o for o in args.ops.split(",") if o]:
        x = None
        try:
            x = make_inputs(torch, op, args.B, args.T, args.H, args.D, args.seed, dev,
                            args.qk_l2norm, args.g_dtype)
        except Exception as exc:  # noqa: BLE001
            print(f"FLA_RESULT op={op} mode=inputs error={one_line(exc)}", flush=True)
            continue
        leaves = [x[n].requires_grad_() for n in grad_names(op)]
        for mode in [m for m in args.modes.split(",") if m]:
            tag = f"op={op} mode={mode}"
            shape = f"shape={args.B}x{args.T}x{args.H}x{args.D}"
            try:
                if mode == "fwd":
                    def fn():
                        with torch.no_grad():
                            call_op(fns, op, x, args.qk_l2norm)
                elif mode == "fwdbwd":
                    # Gradient of (o * do).sum() w.r.t. q, k, v, beta (and g): o.backward(do)
                    # without the product and the sum.
                    def fn():
                        o, _ = call_op(fns, op, x, args.qk_l2norm)
                        torch.autograd.grad(o, leaves, x["do"])
                else:
                    raise ValueError(f"unknown mode {mode}")
                med, lo, mean = time_cuda(torch, fn, args.warmup, args.reps)
                print(f"FLA_RESULT {tag} ms={med:.4f} min_ms={lo:.4f} mean_ms={mean:.4f} "
                      f"reps={args.reps} {shape}", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"FLA_RESULT {tag} error={one_line(exc)}", flush=True)
                tb = traceback.format_exc().strip().splitlines()
                print("FLA_TRACE " + " | ".join(tb[-6:])[:1500], flush=True)
        del x, leaves
        torch.cuda.empty_cache()


def reference64(torch, op, x):
    """Float64 token-by-token recurrence in FLA's layout (state [N, H, K, V]), with autograd."""
    f64 = {n: t.detach().double().requires_grad_() for n, t in x.items() if n not in ("do", "dht")}
    q, k, v, beta = f64["q"], f64["k"], f64["v"], f64["beta"]
    B, T, H, D = q.shape
    h = f64["h0"]
    outs = []
    for t in range(T):
        if op == "gated_deltanet":
            h = h * f64["g"][:, t].exp()[..., None, None]
        kt, vt, bt = k[:, t], v[:, t], beta[:, t]
        v_new = vt - torch.einsum("bhk,bhkv->bhv", kt, h)
        h = h + torch.einsum("bhk,bhv->bhkv", kt, bt[..., None] * v_new)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], h))
    o = torch.stack(outs, dim=1)
    loss = (o * x["do"].double()).sum() + (h * x["dht"].double()).sum()
    names = grad_names(op) + ["h0"]
    grads = torch.autograd.grad(loss, [f64[n] for n in names])
    return o.detach(), h.detach(), dict(zip(names, grads))


def rel_err(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def save(tensors, path_base):
    tensors = {n: t.detach().cpu().contiguous() for n, t in tensors.items()}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path_base + ".safetensors")
        return path_base + ".safetensors"
    except ImportError:
        import torch
        torch.save(tensors, path_base + ".pt")
        return path_base + ".pt"


def dump(torch, fns, args):
    """Small inputs (with h0 and dht), FLA's outputs and gradients, as float32 (the inputs are
    the bf16 values FLA saw, upcast exactly; g is float32 unless --g_dtype bfloat16)."""
    os.makedirs(args.dump, exist_ok=True)
    B, T, H, D = 1, 256, 2, 128
    meta = {"fla_commit": FLA_COMMIT, "shape": {"B": B, "T": T, "H": H, "D": D}, "scale": 1.0,
            "qk_l2norm": args.qk_l2norm, "seed": args.seed + 1,
            "layout": "q,k,v,o,do,dq,dk,dv: [B,T,H,D]; beta,g,dbeta,dg: [B,T,H]; "
                      "h0,ht,dht,dh0: [B,H,K,V] (FLA, key rows; ours is the transpose); "
                      "loss = (o*do).sum() + (ht*dht).sum(); ref_*: float64 recurrence",
            "ops": {}}
    for op in [o for o in args.ops.split(",") if o]:
        info = {}
        try:
            x = make_inputs(torch, op, B, T, H, D, args.seed + 1, "cuda", args.qk_l2norm,
                            args.g_dtype, with_states=True)
            leaves = grad_names(op) + ["h0"]
            for n in leaves:
                x[n].requires_grad_()
            out = {n: t.detach().float() for n, t in x.items()}
            o, ht = call_op(fns, op, x, args.qk_l2norm, with_states=True)
            out["o"], out["ht"] = o.detach().float(), ht.detach().float()
            try:
                grads = torch.autograd.grad((o, ht), [x[n] for n in leaves],
                                            (x["do"], x["dht"].to(ht.dtype)))
                for n, gr in zip(leaves, grads):
                    out["d" + n] = gr.detach().float()
            except Exception as exc:  # noqa: BLE001
                info["backward_error"] = one_line(exc)
                print(f"FLA_DUMP op={op} backward error={one_line(exc)}", flush=True)
            x_ref = dict(x)
            if args.qk_l2norm == "kernel":  # FLA normalised inside: give the reference the same
                F = torch.nn.functional
                x_ref["q"] = F.normalize(x["q"].detach().double(), dim=-1)
                x_ref["k"] = F.normalize(x["k"].detach().double(), dim=-1)
            ro, rh, rg = reference64(torch, op, x_ref)
            out["ref_o"], out["ref_ht"] = ro.float(), rh.float()
            checks = {"o": rel_err(out["o"], ro), "ht": rel_err(out["ht"], rh)}
            for n, gr in rg.items():
                out["ref_d" + n] = gr.float()
                if "d" + n in out and args.qk_l2norm == "pre":
                    checks["d" + n] = rel_err(out["d" + n], gr)
            for n, e in checks.items():
                print(f"FLA_CHECK op={op} tensor={n} rel_err={e:.3e}", flush=True)
            info["rel_err_vs_float64"] = checks
            info["file"] = save(out, os.path.join(args.dump, op))
        except Exception as exc:  # noqa: BLE001
            info["error"] = one_line(exc)
            print(f"FLA_DUMP op={op} error={one_line(exc)}", flush=True)
        meta["ops"][op] = info
    with open(os.path.join(args.dump, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"FLA_DUMP dir={args.dump}", flush=True)


def main():
    args = parse_args()
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"FLA_INFO python={sys.version.split()[0]} torch={torch.__version__} "
          f"triton={triton_version} cuda={torch.version.cuda} device={dev!r}", flush=True)
    if not torch.cuda.is_available():
        print("FLA_RESULT op=all mode=all error=no CUDA device", flush=True)
        return 0
    t0 = time.time()
    try:
        dr, gdr, how = import_fla()
    except Exception as exc:  # noqa: BLE001
        print(f"FLA_RESULT op=all mode=import error={one_line(exc)}", flush=True)
        return 0
    fla = sys.modules["fla"]
    from importlib.util import find_spec
    print(f"FLA_INFO fla_commit={FLA_COMMIT} fla_version={getattr(fla, '__version__', '?')} "
          f"import={how} path={list(getattr(fla, '__path__', []))[:1]} "
          f"import_s={time.time() - t0:.1f} einops={find_spec('einops') is not None} "
          f"tilelang={find_spec('tilelang') is not None} "
          f"flash_qla={find_spec('flash_qla') is not None} "
          f"FLA_TILELANG={os.environ.get('FLA_TILELANG', '')} "
          f"FLA_FLASH_QLA={os.environ.get('FLA_FLASH_QLA', '')}", flush=True)
    print(f"FLA_INFO shape=BxTxHxD={args.B}x{args.T}x{args.H}x{args.D} dtype=bfloat16 "
          f"g_dtype={args.g_dtype} scale=1.0 qk_l2norm={args.qk_l2norm} warmup={args.warmup} "
          f"reps={args.reps}", flush=True)
    fns = (dr, gdr)
    bench(torch, fns, args)
    if args.dump:
        dump(torch, fns, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
