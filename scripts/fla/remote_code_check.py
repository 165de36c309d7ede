#!/usr/bin/python3
"""The logits of a mesa-export remote-code directory's own forward (mesa_lm_core.py, plain
PyTorch, no transformers) against ours (mesa-logits) on the same tokens.

  remote_code_check.py HF_DIR TOKENS.txt OURS.safetensors [--max_abs_diff 2e-3] [--dtype float64]

TOKENS.txt holds one sequence per line; OURS is mesa-logits' output on it (before the soft-cap,
which is applied here as the model applies it). Prints the largest difference and the argmax
agreement; exits 1 when the difference exceeds --max_abs_diff.
"""
import argparse
import importlib.util
import json
import math
import struct
import sys

import torch


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        if meta["dtype"] == "F32":
            t = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32)
        elif meta["dtype"] == "BF16":
            t = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.int16).to(torch.int32) << 16
            t = t.view(torch.float32)
        else:
            raise SystemExit("%s: %s has dtype %s" % (path, name, meta["dtype"]))
        out[name] = t.reshape(meta["shape"]).clone()
    return out


def load_weights(hf_dir):
    try:
        index = json.load(open(hf_dir + "/model.safetensors.index.json"))
    except FileNotFoundError:
        return load_safetensors(hf_dir + "/model.safetensors")
    weights = {}
    for shard in sorted(set(index["weight_map"].values())):
        weights.update(load_safetensors(hf_dir + "/" + shard))
    missing = set(index["weight_map"]) - set(weights)
    if missing:
        raise SystemExit("index names tensors no shard has: %s" % sorted(missing)[:5])
    return weights


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hf_dir")
    parser.add_argument("tokens")
    parser.add_argument("ours")
    parser.add_argument("--max_abs_diff", type=float, default=2e-3)
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("mesa_lm_core", args.hf_dir + "/mesa_lm_core.py")
    core = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(core)
    cfg = json.load(open(args.hf_dir + "/config.json"))
    model = core.MesaLM(cfg)
    missing, unexpected = model.load_state_dict(load_weights(args.hf_dir), strict=False)
    if missing or unexpected:
        raise SystemExit("state dict: missing %s, unexpected %s" % (missing[:5], unexpected[:5]))
    dtype = getattr(torch, args.dtype)
    model.to(dtype)
    rows = [[int(x) for x in line.split()] for line in open(args.tokens) if line.strip()]
    tokens = torch.tensor(rows, dtype=torch.long)
    with torch.no_grad():
        theirs = model(tokens, compute_dtype=dtype).double()
    ours = load_safetensors(args.ours)["logits"].double()
    cap = cfg["logit_softcap"]
    if cap > 0:
        ours = cap * torch.tanh(ours / cap)
    if ours.shape != theirs.shape:
        raise SystemExit("shapes differ: ours %s, remote code %s" % (tuple(ours.shape), tuple(theirs.shape)))
    diff = (ours - theirs).abs().max().item()
    agree = (ours.argmax(-1) == theirs.argmax(-1)).sum().item()
    print("%s: layers %s, max |dlogit| %.3e (logit scale %.2f), argmax agreement %d/%d" % (
        args.hf_dir, ",".join(cfg["layer_mixers"]), diff, ours.abs().max().item(), agree,
        tokens.numel()))
    if not math.isfinite(diff) or diff > args.max_abs_diff:
        print("FAIL: max |dlogit| %.3e > %.1e" % (diff, args.max_abs_diff))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
