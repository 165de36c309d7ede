#!/usr/bin/env python3
"""Loads a mesa-export directory with FLA's MesaNetForCausalLM and compares its logits with ours.

  python3 scripts/fla/compare_logits.py --hf HF_DIR --tokens tokens.txt \
      --ours cpu_fp32=logits_cpu.safetensors --ours cuda_fp32=logits_cuda.safetensors

FLA comes from .fla (PYTHONPATH), at the commit in model/testdata/fla_mesa_net.json. Two FLA
forwards of the same export on the same tokens:
  - "fla_chunk": MesaNetForCausalLM.from_pretrained as a user loads it (float32 weights; FLA's
    chunk kernel, which rounds the normalised q and k to float16 inside and runs
    max_cg_step_training CG steps);
  - "fla_exact": the same model with the layer's chunk_mesa_net replaced by FLA's own
    naive_mesa_net_exact (a dense float32 solve per token), so that the function itself is
    compared, apart from the kernel's float16 and CG truncation.
Each is compared with every --ours file (mesa-logits output): the largest absolute logit
difference, the same relative to the largest |logit|, argmax agreement, and the mean next-token
loss of both. Prints one `COMPARE ...` line per pair; exits 0 (the numbers are the result).
"""
import argparse
import json
import struct
import sys
import time

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        begin, end = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(
            meta["shape"])
    return out


def next_token_loss(logits, tokens):
    lp = torch.log_softmax(logits[:, :-1].double(), -1)
    return -lp.gather(-1, tokens[:, 1:, None].cpu()).mean().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf", required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--ours", action="append", default=[], help="NAME=logits.safetensors")
    args = parser.parse_args()

    start = time.time()
    import fla  # noqa: F401  (registers nothing we rely on; the classes are imported directly)
    import fla.layers.mesa_net as layer_module
    from fla.models.mesa_net.modeling_mesa_net import MesaNetForCausalLM
    from fla.modules.l2norm import l2_norm
    from fla.ops.mesa_net import naive_mesa_net_exact
    print(f"INFO fla imported in {time.time() - start:.1f}s from {fla.__file__}", flush=True)

    rows = [list(map(int, line.split())) for line in open(args.tokens) if line.strip()]
    tokens = torch.tensor(rows, dtype=torch.long, device="cuda")
    model = MesaNetForCausalLM.from_pretrained(args.hf, torch_dtype=torch.float32).cuda().eval()
    print("INFO config", json.dumps({k: getattr(model.config, k) for k in (
        "hidden_size", "num_heads", "head_dim", "num_hidden_layers", "vocab_size",
        "max_cg_step_training", "tie_word_embeddings", "norm_eps")}), flush=True)

    chunk = layer_module.chunk_mesa_net

    def exact(q, k, v, g, beta, lamb, output_final_state=False, max_CG_iteration=30,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
        if use_qk_l2norm_in_kernel:
            q, k = l2_norm(q.float()), l2_norm(k.float())
        o, h_kk, h_kv = naive_mesa_net_exact(q, k, v, g, lamb, beta)
        return o.to(v.dtype), h_kk, h_kv

    fla_logits = {}
    for name, fn in (("fla_chunk", chunk), ("fla_exact", exact)):
        layer_module.chunk_mesa_net = fn
        with torch.no_grad():
            fla_logits[name] = model(input_ids=tokens, use_cache=False).logits.float().cpu()
    layer_module.chunk_mesa_net = chunk

    cpu_tokens = tokens.cpu()
    for spec in args.ours:
        ours_name, path = spec.split("=", 1)
        ours = read_safetensors(path)["logits"]
        for fla_name, theirs in fla_logits.items():
            assert theirs.shape == ours.shape, (theirs.shape, ours.shape)
            diff = (theirs - ours).abs()
            scale = ours.abs().max().item()
            agree = (theirs.argmax(-1) == ours.argmax(-1)).float().mean().item()
            print(f"COMPARE ours={ours_name} fla={fla_name} max_abs_diff={diff.max().item():.3e} "
                  f"mean_abs_diff={diff.mean().item():.3e} max_abs_logit={scale:.3f} "
                  f"rel={diff.max().item() / scale:.3e} argmax_agree={agree:.4f} "
                  f"loss_ours={next_token_loss(ours, cpu_tokens):.6f} "
                  f"loss_fla={next_token_loss(theirs, cpu_tokens):.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
