#!/usr/bin/env python3
"""On the GPU machine: every export made by scripts/gpu/make_remote_code_check.sh, loaded the way
users load it, against our logits and our greedy continuations.

  remote_code_transformers.py DIR [--device cuda] [--max_abs_diff 1e-4] [--fla_max_abs_diff 2e-2]

Remote-code exports: AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True) in
float32, logits on DIR/tokens.txt against mesa-logits' (soft-capped as the model caps them), and
generate (greedy, 12 new tokens) from AutoTokenizer's encoding of each prompt against
mesa-generate's tokens. The FLA-format export the same way through FLA's MesaNetForCausalLM
(import fla first; skipped when FLA is not importable). One line per model; exit 1 when a
logit difference exceeds its bound (the remote code computes in float32 what we compute in float32;
FLA's Triton kernels run their matmuls in TF32/bf16, hence its wider bound) or a model fails to
load or generate.
"""
import argparse
import json
import os
import sys
import traceback

import torch

# The safetensors reader of the CPU check (F32 and BF16), the same file in this checkout.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fla"))
from remote_code_check import load_safetensors  # noqa: E402


def check(name, path, args, rows, auto_model, auto_tokenizer):
    cfg = json.load(open(os.path.join(path, "config.json")))
    remote = cfg.get("model_type") == "mesa_lm"
    kwargs = {"trust_remote_code": True} if remote else {}
    model = auto_model.from_pretrained(path, dtype=torch.float32, **kwargs).to(args.device).eval()
    tokens = torch.tensor(rows, dtype=torch.long, device=args.device)
    with torch.no_grad():
        theirs = model(input_ids=tokens).logits.double().cpu()
    ours = load_safetensors(os.path.join(args.dir, name + ".logits.safetensors"))["logits"].double()
    cap = cfg.get("logit_softcap", 0) or 0
    if cap > 0:
        ours = cap * torch.tanh(ours / cap)
    diff = (ours - theirs).abs().max().item()
    agree = (ours.argmax(-1) == theirs.argmax(-1)).sum().item()
    tokenizer = auto_tokenizer.from_pretrained(path, **kwargs)
    matched, total = 0, 0
    for line in open(os.path.join(args.dir, name + ".generate.jsonl")):
        want = json.loads(line)
        ids = [cfg["bos_token_id"]] + tokenizer(want["prompt"], add_special_tokens=False)["input_ids"]
        prompt = torch.tensor([ids], device=args.device)
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=len(want["tokens"]), min_new_tokens=len(want["tokens"]))
        got = out[0, len(ids):].tolist()
        same = 0
        while same < len(got) and same < len(want["tokens"]) and got[same] == want["tokens"][same]:
            same += 1
        matched += same
        total += len(want["tokens"])
    print("%-8s %-11s layers %-40s max |dlogit| %.2e (scale %.1f)  argmax %d/%d  generate %d/%d "
          "tokens as ours" % (name, "remote_code" if remote else "fla", ",".join(
              cfg.get("layer_mixers", ["mesa"] * cfg["num_hidden_layers"])), diff,
              ours.abs().max().item(), agree, tokens.numel(), matched, total))
    return diff <= (args.max_abs_diff if remote else args.fla_max_abs_diff)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max_abs_diff", type=float, default=1e-4)
    parser.add_argument("--fla_max_abs_diff", type=float, default=2e-2)
    args = parser.parse_args()
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    print("transformers", transformers.__version__, "torch", torch.__version__,
          torch.cuda.get_device_name() if args.device == "cuda" else "cpu")
    rows = [[int(x) for x in line.split()] for line in open(os.path.join(args.dir, "tokens.txt"))]
    ok = True
    for name in ("paper", "linear", "softmax", "hawk", "ssd", "fla"):
        path = os.path.join(args.dir, name)
        if name == "fla":
            try:
                import fla  # noqa: F401  (registers FLA's model types with transformers)
            except ImportError:
                print("fla: FLA not importable, skipped")
                continue
        try:
            ok = check(name, path, args, rows, AutoModelForCausalLM, AutoTokenizer) and ok
        except Exception:  # report every model, then fail
            traceback.print_exc()
            print("%s: FAILED" % name)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
