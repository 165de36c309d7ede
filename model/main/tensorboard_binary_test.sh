#!/bin/bash
# mesa-train's TensorBoard events, read by others' code: a tiny run with evaluations, its event
# file under CHECKPOINT_ROOT/tensorboard checked record by record with Debian's python3-crc32c
# (the masked CRC-32C of the length and of the data) and decoded by python3-protobuf from the
# .proto (protoc --python_out); every step's loss and the evaluations' losses equal the
# trainer's JSON-lines events (to float32). A resumed run adds a second file.
set -euo pipefail
BIN="${TEST_SRCDIR}/${TEST_WORKSPACE}/model/main"
ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE}"
T="${TEST_TMPDIR}"
cd "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }

awk 'BEGIN { srand(5); for (i = 0; i < 300; i++) { s = "";
      for (j = 0; j < 12; j++) s = s (rand() < 0.5 ? "the state " : "a solve ");
      print s } }' > corpus.txt
"$BIN/mesa-data" --input corpus.txt --output_dir data --split line --val_fraction 0.1 \
  --progress=false > /dev/null
job() {  # $1: steps
  cat <<YAML
name: tb-test
model: {vocab_size: 257, d_model: 32, n_layers: 2, n_heads: 2, head_dim: 16, cg_steps: 5}
data: {train_path: "$T/data/train_*.bin", val_path: "$T/data/val_*.bin", seq_len: 32,
       batch_size: 4}
optimizer: {lr: 0.01, warmup_steps: 2}
training: {steps: $1, seed: 3, log_interval: 1, eval_interval: 4}
checkpoint: {dir: "$T/ckpt", interval_steps: 4}
YAML
}
job 8 > a.yaml
job 12 > b.yaml
"$BIN/mesa-train" --config a.yaml --workdir w --threads 2 --events_file events.jsonl > /dev/null
"$BIN/mesa-train" --config b.yaml --workdir w --threads 2 --resume ckpt --events_file events.jsonl \
  > /dev/null
ls ckpt/tensorboard/events.out.tfevents.* > /dev/null || fail "no event file in ckpt/tensorboard"

mkdir -p py
protoc -I"$ROOT/proto" --python_out=py "$ROOT/proto/tensorboard/event.proto"
PYTHONPATH=py python3 - "$T/ckpt/tensorboard" events.jsonl <<'PY'
import glob, json, math, os, struct, sys
import crc32c
from tensorboard import event_pb2

def masked(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

files = sorted(glob.glob(os.path.join(sys.argv[1], "events.out.tfevents.*")))
assert len(files) == 2, f"one file per run, got {files}"
scalars = {}  # (tag, step) -> value, over both files
for path in files:
    data = open(path, "rb").read()
    at, events = 0, []
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert header_crc == masked(header), f"{path}: length checksum at {at}"
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert body_crc == masked(body), f"{path}: data checksum at {at}"
        event = event_pb2.Event()
        event.ParseFromString(body)
        events.append(event)
        at += 16 + length
    assert at == len(data), f"{path}: trailing bytes"
    assert events[0].file_version == "brain.Event:2", events[0]
    assert events[0].wall_time > 1.7e9
    for e in events[1:]:
        for v in e.summary.value:
            scalars[(v.tag, e.step)] = v.simple_value

want = {}
for line in open(sys.argv[2]):
    e = json.loads(line)
    if "step" in e and not e["step"].get("skipped"):
        s = e["step"]
        want[("train/loss", int(s["step"]))] = s["loss"]
        want[("train/lr", int(s["step"]))] = s["lr"]
    if "eval" in e and "metrics" in e["eval"]:
        want[("eval/loss", int(e["eval"].get("step", 0)))] = e["eval"]["metrics"]["val_loss"]
train_steps = sorted(step for tag, step in want if tag == "train/loss")
assert train_steps == list(range(1, 13)), train_steps  # 8 steps, then resumed to 12
assert any(tag == "eval/loss" for tag, _ in want), "no evaluation events"
for key, value in want.items():
    assert key in scalars, f"{key} missing from the event files"
    assert math.isclose(scalars[key], value, rel_tol=1e-6, abs_tol=1e-9), (key, scalars[key], value)
tags = {tag for tag, _ in scalars}
for tag in ("train/grad_norm", "train/tokens_per_second", "train/step_seconds", "train/cg_steps",
            "eval/perplexity"):
    assert tag in tags, f"{tag} not written: {sorted(tags)}"
print(f"ok: {len(files)} files, {len(scalars)} scalars")
PY
