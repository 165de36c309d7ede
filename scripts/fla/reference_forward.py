#!/usr/bin/python3
"""FLA's MesaNetForCausalLM forward in NumPy float64, from a Hugging Face export, against ours.

  reference_forward.py HF_DIR TOKENS.txt OURS.safetensors [--max_abs_diff 1e-3]

What FLA computes (fla/models/mesa_net/modeling_mesa_net.py and fla/layers/mesa_net.py at the
commit of model/testdata/fla_mesa_net.json), with a dense solve in place of its CG kernel:
  x = embeddings[tokens]; per layer: h = RMSNorm(x); q, k = SiLU(causal depthwise conv(h W^T))
  (weight [C, 1, K]: tap j multiplies x[t - (K-1) + j], no bias), L2-normalised per head (eps
  1e-6); v = h Wv^T; beta = sigmoid(b_proj h); g = logsigmoid(a_proj h); lambda = softplus(p) +
  lambda_lower_bound; S_kk = e^g S_kk + beta k k^T, S_kv = e^g S_kv + beta k v^T,
  q* = (S_kk + diag(lambda))^-1 q, o = S_kv^T q*; o = RMSNorm_head(o) o_proj^T; x += o;
  x += down(SiLU(gate(h2)) * up(h2)) with h2 = RMSNorm(x); logits = RMSNorm(x) lm_head^T.
Every RMSNorm uses config.json's norm_eps. OURS is mesa-logits output on the same tokens (one
sequence per line). Prints the largest difference; exits 1 when it exceeds --max_abs_diff.
"""
import argparse
import json
import struct
import sys

import numpy as np


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        begin, end = meta["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(
            meta["shape"]).astype(np.float64)
    return out


def forward(cfg, w, tokens):
    eps, heads, d, width = cfg["norm_eps"], cfg["num_heads"], cfg["head_dim"], cfg["conv_size"]

    def rms(x, weight):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight

    def silu(x):
        return x / (1 + np.exp(-x))

    def conv(x, weight):
        t = x.shape[0]
        padded = np.concatenate([np.zeros((width - 1, x.shape[1])), x])
        return sum(weight[:, 0, j] * padded[j:j + t] for j in range(width))

    def l2(x):
        return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)

    t = len(tokens)
    x = w["model.embeddings.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "attn_norm.weight"])
        q = l2(silu(conv(h @ w[p + "attn.q_proj.weight"].T, w[p + "attn.q_conv1d.weight"]))
               .reshape(t, heads, d))
        k = l2(silu(conv(h @ w[p + "attn.k_proj.weight"].T, w[p + "attn.k_conv1d.weight"]))
               .reshape(t, heads, d))
        v = (h @ w[p + "attn.v_proj.weight"].T).reshape(t, heads, d)
        beta = 1 / (1 + np.exp(-(h @ w[p + "attn.b_proj.weight"].T + w[p + "attn.b_proj.bias"])))
        a = h @ w[p + "attn.a_proj.weight"].T + w[p + "attn.a_proj.bias"]
        g = -np.logaddexp(0, -a)
        lamb = (np.logaddexp(0, w[p + "attn.lambda_params"]) + cfg["lambda_lower_bound"]).reshape(
            heads, d)
        o = np.zeros((t, heads, d))
        for hh in range(heads):
            s_kk, s_kv = np.zeros((d, d)), np.zeros((d, d))
            for s in range(t):
                decay = np.exp(g[s, hh])
                s_kk = decay * s_kk + beta[s, hh] * np.outer(k[s, hh], k[s, hh])
                s_kv = decay * s_kv + beta[s, hh] * np.outer(k[s, hh], v[s, hh])
                o[s, hh] = np.linalg.solve(s_kk + np.diag(lamb[hh]), q[s, hh]) @ s_kv
        o = rms(o, w[p + "attn.o_norm.weight"]).reshape(t, heads * d)
        x = x + o @ w[p + "attn.o_proj.weight"].T
        h2 = rms(x, w[p + "mlp_norm.weight"])
        x = x + (silu(h2 @ w[p + "mlp.gate_proj.weight"].T) * (h2 @ w[p + "mlp.up_proj.weight"].T)
                 ) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("hf")
    parser.add_argument("tokens")
    parser.add_argument("ours")
    parser.add_argument("--max_abs_diff", type=float, default=1e-3)
    args = parser.parse_args()
    cfg = json.load(open(args.hf + "/config.json"))
    weights = load_safetensors(args.hf + "/model.safetensors")
    ours = load_safetensors(args.ours)["logits"]
    rows = [list(map(int, line.split())) for line in open(args.tokens) if line.strip()]
    worst = 0.0
    for b, row in enumerate(rows):
        logits = forward(cfg, weights, row)
        worst = max(worst, float(np.abs(logits - ours[b]).max()))
    print(f"FLA_REFERENCE max_abs_diff={worst:.3e} max_abs_logit={np.abs(ours).max():.3f}")
    return 0 if worst <= args.max_abs_diff else 1


if __name__ == "__main__":
    sys.exit(main())
