#!/usr/bin/env python3
"""Hugging Face transformers' generate for the Llama of MesaNet-small's size, the serving baseline of
docs/PERFORMANCE.md ("Serving"): 14 layers x 768, 6 heads x 128, MLP 2304, GPT-2 vocabulary padded
to 50304, tied embeddings, random weights, bf16, static KV cache, greedy; a 1k-token prompt and
128 new tokens per sequence (min_new_tokens, so every sequence makes all of them). Prints one
BENCH line per batch size: tokens/s = batch x new tokens / wall time of generate (prefill included),
the same count serve_load_bench makes at the client.

Usage: hf_generate_bench.py [BATCH ...]   (default 1 64)
"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    batches = [int(b) for b in sys.argv[1:]] or [1, 64]
    prompt, new = 1024, 128
    config = LlamaConfig(vocab_size=50304, hidden_size=768, intermediate_size=2304,
                         num_hidden_layers=14, num_attention_heads=6, num_key_value_heads=6,
                         head_dim=128, max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=50256, eos_token_id=50256, pad_token_id=0)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    for batch in batches:
        ids = torch.randint(0, 50000, (batch, prompt), device="cuda")
        kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False,
                      cache_implementation="static", pad_token_id=0,
                      attention_mask=torch.ones_like(ids))
        with torch.inference_mode():
            model.generate(ids, **kwargs)  # warm-up (allocations, kernels)
            torch.cuda.synchronize()
            times = []
            for _ in range(3):
                start = time.perf_counter()
                out = model.generate(ids, **kwargs)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        made = (out.shape[1] - prompt) * batch
        best = min(times)
        print("BENCH hf_generate " + json.dumps({
            "batch": batch, "prompt_tokens": prompt, "new_tokens": new, "params": params,
            "wall_s_min": best, "wall_s_all": times, "tokens_per_s": made / best,
            "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
