#!/usr/bin/env python3
"""Writes llama3_style_tokenizer.json: a small Hugging Face tokenizer.json in the Llama-3 layout.

No real Llama-3 tokenizer.json is available offline here (Debian and npm ship none; the npm
package llama3-tokenizer-js embeds its vocabulary in its own packed format), so the tests use this
stand-in with everything that makes a tokenizer "Llama-3 style": byte-level BPE over GPT-2's
byte-to-unicode alphabet, Llama-3's Split regex and ByteLevel(use_regex=false) pre-tokenizer
sequence, ignore_merges, and the special tokens <|begin_of_text|> / <|end_of_text|> as added
tokens. The merges are learned here by plain BPE on the text below (deterministic).
Run: python3 model/testdata/make_llama3_style_tokenizer.py > model/testdata/llama3_style_tokenizer.json
"""
import collections
import json
import re

TEXT = """
The quick brown fox jumps over the lazy dog. A language model reads text as tokens, and the
tokenizer decides which pieces of text become one token. Byte-level BPE starts from the 256
bytes and merges the most frequent neighbouring pair again and again, so that common words and
parts of words end up as single tokens while any text at all can still be written with bytes.
MesaNet replaces attention with a layer that solves a small regression problem at every step;
the solver is conjugate gradients, and the number of steps is the test-time compute. Training
reads packed documents, each one starting with the begin-of-text token, and the loss is not
taken on that token. The trainer writes checkpoints, and the export turns a checkpoint into a
directory that other tools can load: the configuration, the weights and the tokenizer files.
In the beginning the weights are random; after training they describe the text they have seen.
"""
NUM_MERGES = 300
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    byte_char = bytes_to_unicode()
    vocab = {byte_char[b]: b for b in range(256)}
    # Words as Python's re sees them (close enough to the regex for learning merges).
    words = collections.Counter(re.findall(r" ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+", TEXT))
    seqs = {w: [byte_char[b] for b in w.encode()] for w in words}
    merges = []
    while len(merges) < NUM_MERGES:
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if count < 2:
            break
        merges.append([a, b])
        vocab[a + b] = len(vocab)
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    added = []
    for name in specials:
        added.append({"id": len(vocab), "content": name, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
        vocab[name] = len(vocab)
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
    print(json.dumps(doc, ensure_ascii=False))


main()
