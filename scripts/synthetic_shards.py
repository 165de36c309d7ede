#!/usr/bin/env python3
"""Writes random GPT-2-vocabulary token shards (llm.c .bin layout, uint16) for throughput runs.

Usage: synthetic_shards.py DIR [TRAIN_TOKENS] [VAL_TOKENS]. The tokens' content does not matter for
tokens/s, and random tokens do not compress, so the GPU scripts make them on the GPU machine instead
of carrying them there.
"""
import array
import os
import random
import sys


def main():
    out = sys.argv[1]
    train = int(sys.argv[2]) if len(sys.argv) > 2 else 4_000_000
    val = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    for name, n in (("train_000.bin", train), ("val_000.bin", val)):
        header = array.array("i", [20240520, 1, n] + [0] * 253)
        tokens = array.array("H", (rng.randrange(50256) for _ in range(n)))
        with open(os.path.join(out, name), "wb") as f:
            header.tofile(f)
            tokens.tofile(f)


if __name__ == "__main__":
    main()
