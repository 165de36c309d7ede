#!/bin/bash
# mesa-serve end to end with real clients: trains a tiny model with the real mesa-train, serves its
# checkpoint, and talks to it with curl and the npm `openai` package — plain, streamed, concurrent,
# cancelled, bad input, wrong token, over TLS — checking greedy text against mesa-generate, echo +
# logprobs against mesa-logits, the prefix cache, /metrics and a clean drain on SIGTERM.
set -euo pipefail
ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE}"
MAIN="$ROOT/model/main"
SERVE="$ROOT/serve/mesa-serve"
T="${TEST_TMPDIR}"
cd "$T"
# On a failure, the command and what the servers said. (No `curl | grep -q` below: under
# pipefail, grep leaving early fails curl with SIGPIPE.)
trap 'echo "failed at line $LINENO: $BASH_COMMAND"' ERR
trap 'rc=$?; if [ $rc -ne 0 ]; then for f in *.err; do echo "== $f"; tail -5 "$f"; done; fi' EXIT
# The npm openai package (deploy/tools, installed by scripts/setup.sh), found from the scripts here.
ln -s "$(bash "$ROOT/deploy/tools/tools.sh" dir)/node_modules" node_modules

awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) { n = int(rand() * 5); s = "";
      for (j = 0; j < 6; j++) s = s sprintf("%s%d ", (j % 2 ? "cat" : "dog"), (n + j) % 5);
      print s } }' > corpus.txt
"$MAIN/mesa-data" --input corpus.txt --output_dir data --split line --val_fraction 0.1 \
  --shard_tokens 50000 > /dev/null
cat > job.yaml <<YAML
name: tiny-serve
type: train
model: {vocab_size: 257, d_model: 32, n_layers: 2, n_heads: 2, head_dim: 16, cg_steps: 8}
data: {train_path: "$T/data/train_*.bin", val_path: "$T/data/val_*.bin", seq_len: 64, batch_size: 8}
optimizer: {lr: 0.01, warmup_steps: 10}
training: {steps: 120, seed: 3}
checkpoint: {interval_steps: 120, keep_last: 1}
YAML
"$MAIN/mesa-train" --config job.yaml --workdir run --threads 2 > /dev/null 2>&1
CKPT="$T/run/checkpoints"

# Starts mesa-serve with extra flags; sets PID and PORT.
start() {
  local log=$1
  shift
  "$SERVE" --checkpoint "$CKPT" --port 0 --threads 2 --slots 4 --prefill_chunk 16 \
    --prefix_cache_stride 16 "$@" > "$log.out" 2> "$log.err" &
  PID=$!
  for _ in $(seq 100); do
    PORT=$(grep -o 'listening on port [0-9]*' "$log.out" | grep -o '[0-9]*$' || true)
    [ -n "$PORT" ] && return 0
    kill -0 "$PID" 2> /dev/null || { cat "$log.err"; echo "mesa-serve died"; exit 1; }
    sleep 0.1
  done
  echo "mesa-serve did not start"; cat "$log.err"; exit 1
}

start plain
URL="http://127.0.0.1:$PORT"
grep -q 'model "tiny-serve"' plain.err  # the job's name is the model's
grep -q '"status":"ok"' <<<"$(curl -sf "$URL/healthz")"
curl -sf "$URL/v1/models" > models.json
PROMPT='dog1 cat2 dog3 cat4 dog0 cat1 dog2 cat3 '  # 40 bytes: more than two prefill pieces
curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"tiny-serve\", \"prompt\": \"$PROMPT\", \"max_tokens\": 24, \"temperature\": 0}" \
  > plain.json
curl -sfN "$URL/v1/completions" \
  -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 24, \"temperature\": 0, \"stream\": true,
       \"stream_options\": {\"include_usage\": true}}" > stream.txt
curl -sf "$URL/v1/completions" \
  -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 0, \"echo\": true, \"logprobs\": 2}" > echo.json
"$MAIN/mesa-generate" --checkpoint "$CKPT" --threads 2 --json --prompt "$PROMPT" \
  --max_new_tokens 24 --temperature 0 --prefill_chunk 16 > generate.json 2> /dev/null
# Concurrent: eight requests at once (greedy and sampled mixed); each greedy one must equal the
# request served alone (batch invariance through the endpoint).
clients=()
for i in $(seq 8); do
  if [ $((i % 2)) -eq 0 ]; then body="\"temperature\": 0"; else body="\"temperature\": 0.9, \"seed\": $i"; fi
  curl -sf "$URL/v1/completions" -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 24, $body}" \
    > "concurrent$i.json" &
  clients+=($!)
done
for c in "${clients[@]}"; do wait "$c"; done
# The same prompt again resumes from its prefix snapshot (BOS + 40 bytes - 1 = 40 positions: the
# snapshot at 32).
curl -sf "$URL/v1/completions" -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 24, \"temperature\": 0}" \
  > cached.json

# mesa-logits on BOS and the prompt: echo's log-probabilities must equal its soft-capped log-softmax.
python3 - "$PROMPT" <<'PY' > tokens.txt
import sys
print(" ".join(str(t) for t in [256] + list(sys.argv[1].encode())))
PY
"$MAIN/mesa-logits" --checkpoint "$CKPT" --tokens tokens.txt --out logits.safetensors > /dev/null 2>&1

python3 - "$PROMPT" <<'PY'
import json, math, struct, sys
prompt = sys.argv[1]
plain = json.load(open("plain.json"))
gen = json.loads(open("generate.json").read())
c = plain["choices"][0]
assert plain["object"] == "text_completion" and plain["model"] == "tiny-serve", plain
assert c["finish_reason"] == "length" and plain["usage"]["completion_tokens"] == 24, plain
assert plain["usage"]["prompt_tokens"] == len(prompt.encode()), plain["usage"]
assert c["text"] == gen["completion"], (c["text"], gen["completion"])
assert "cat" in c["text"] and "dog" in c["text"], c["text"]
models = json.load(open("models.json"))
assert models["data"][0]["id"] == "tiny-serve", models

# Streamed: the same text in pieces, a finish_reason, usage, then [DONE].
events = [l[len("data: "):] for l in open("stream.txt").read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-3:]
chunks = [json.loads(e) for e in events[:-1]]
text = "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"])
assert text == c["text"], (text, c["text"])
assert [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]][-1] == "length"
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 24, chunks[-1]

for i in range(2, 9, 2):
    other = json.load(open(f"concurrent{i}.json"))["choices"][0]["text"]
    assert other == c["text"], (i, other, c["text"])
for i in range(1, 9, 2):
    assert json.load(open(f"concurrent{i}.json"))["usage"]["completion_tokens"] >= 1
cached = json.load(open("cached.json"))
assert cached["choices"][0]["text"] == c["text"], cached
assert cached["usage"]["prompt_tokens_details"]["cached_tokens"] == 32, cached["usage"]

# echo + logprobs against mesa-logits (float32 logits before the soft cap of 30).
echo = json.load(open("echo.json"))["choices"][0]
assert echo["text"] == prompt and echo["finish_reason"] == "length", echo
lp = echo["logprobs"]
assert "".join(lp["tokens"]) == prompt and len(lp["token_logprobs"]) == len(prompt), lp
assert all(len(t) <= 2 for t in lp["top_logprobs"]), lp["top_logprobs"][:2]
raw = open("logits.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
shape = header["logits"]["shape"]
begin, end = header["logits"]["data_offsets"]
values = struct.unpack(f"<{(end - begin) // 4}f", raw[8 + n + begin:8 + n + end])
vocab = shape[2]
ids = [256] + list(prompt.encode())
worst = 0.0
for j in range(len(prompt)):
    row = [30.0 * math.tanh(z / 30.0) for z in values[j * vocab:(j + 1) * vocab]]
    m = max(row)
    lse = m + math.log(sum(math.exp(z - m) for z in row))
    worst = max(worst, abs((row[ids[j + 1]] - lse) - lp["token_logprobs"][j]))
assert worst < 1e-4, worst
print("plain, stream, concurrent, cache, echo: ok; echo vs mesa-logits max diff", worst)
PY

# Bad input: OpenAI-style JSON errors naming the parameter, and the server stays up.
code() { curl -s -o body.json -w '%{http_code}' "$@"; }
[ "$(code "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": -2}')" = 400 ]
grep -q '"param":"max_tokens"' body.json
[ "$(code "$URL/v1/completions" -d 'not json')" = 400 ]
[ "$(code "$URL/v1/completions" -d '{"prompt": "x", "model": "gpt-4"}')" = 404 ]
[ "$(code "$URL/v1/completions" -d '{"prompt": [999]}')" = 400 ]
[ "$(code "$URL/v1/completions" -d '{"prompt": "x", "best_of": 3, "n": 1}')" = 400 ]
[ "$(code "$URL/v1/nothing")" = 404 ]
grep -q '"error"' body.json
head -c 9000000 /dev/zero | tr '\0' ' ' > big.json
[ "$(code "$URL/v1/completions" --data-binary @big.json)" = 413 ]
printf '{"prompt": "\xff\xfe"}' > invalid_utf8.json
[ "$(code "$URL/v1/completions" --data-binary @invalid_utf8.json)" = 400 ]

# Cancelled: clients that go away mid-generation free their slots (streamed and whole).
timeout 1 curl -sN "$URL/v1/completions" -d '{"prompt": "dog", "max_tokens": 60000, "stream": true}' \
  > /dev/null || true
timeout 1 curl -s "$URL/v1/completions" -d '{"prompt": "cat", "max_tokens": 60000}' > /dev/null || true
for _ in $(seq 50); do
  grep -q '"running":0' <<<"$(curl -sf "$URL/healthz")" && break
  sleep 0.1
done
grep -q '"running":0' <<<"$(curl -sf "$URL/healthz")"
curl -sf "$URL/metrics" > metrics.txt
grep -q '^mesa_serve_requests_total{reason="cancelled"} 2' metrics.txt
grep -Eq '^mesa_serve_time_to_first_token_seconds_count [1-9]' metrics.txt
grep -Eq '^mesa_serve_prefix_cache_hits_total [1-9]' metrics.txt
grep -q '^mesa_serve_http_responses_total{code="413"} 1' metrics.txt

# The npm openai client: whole, streamed, and its errors.
cat > client.mjs <<'JS'
import OpenAI from "openai";
const [url, key, prompt, expected] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: key, maxRetries: 0 });
const whole = await client.completions.create({ model: "tiny-serve", prompt, max_tokens: 24, temperature: 0 });
if (whole.choices[0].text !== expected) throw new Error(`whole: ${JSON.stringify(whole)}`);
let streamed = "";
const stream = await client.completions.create({ model: "tiny-serve", prompt, max_tokens: 24, temperature: 0, stream: true });
for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? "";
if (streamed !== expected) throw new Error(`streamed: ${streamed}`);
const two = await client.completions.create({ model: "tiny-serve", prompt: [prompt, "cat0 "], max_tokens: 4, n: 2, temperature: 0.8, seed: 1 });
if (two.choices.length !== 4) throw new Error(`n: ${JSON.stringify(two)}`);
try {
  await client.completions.create({ model: "tiny-serve", prompt, max_tokens: 24, top_p: 2 });
  throw new Error("top_p 2 was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError)) throw e;
}
const models = await client.models.list();
if (models.data[0].id !== "tiny-serve") throw new Error("models");
console.log("openai client: ok");
JS
EXPECTED=$(python3 -c 'import json; print(json.load(open("plain.json"))["choices"][0]["text"], end="")')
node client.mjs "$URL" unused "$PROMPT" "$EXPECTED"

# SIGTERM drains and exits 0.
kill -TERM "$PID"
rc=0
wait "$PID" || rc=$?
[ "$rc" -eq 0 ] || { echo "mesa-serve exited $rc after SIGTERM"; exit 1; }

# TLS and bearer tokens: HTTPS only; /v1/* need a valid token, /healthz does not.
openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 1 \
  -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2> /dev/null
cat > tokens.yaml <<'YAML'
users:
  - {name: alice, token: alice-token-0123456789, role: user}
YAML
start secure --tls_cert cert.pem --tls_key key.pem --tokens_file tokens.yaml --metrics_port 0
S="https://127.0.0.1:$PORT"
# Probes and Prometheus in plaintext on their own port.
MPORT=$(grep -o 'metrics on port [0-9]*' secure.out | grep -o '[0-9]*$')
grep -q '"status":"ok"' <<<"$(curl -sf "http://127.0.0.1:$MPORT/healthz")"
grep -q '^mesa_serve_slots 4' <<<"$(curl -sf "http://127.0.0.1:$MPORT/metrics")"
[ "$(code "http://127.0.0.1:$MPORT/v1/models")" = 404 ]  # the API is not there
grep -q '"status":"ok"' <<<"$(curl -sf --cacert cert.pem "$S/healthz")"
[ "$(code --cacert cert.pem "$S/v1/completions" -d '{"prompt": "dog"}')" = 401 ]
grep -q '"type":"authentication_error"' body.json
[ "$(code --cacert cert.pem -H 'Authorization: Bearer wrong-token-0123456789' "$S/v1/models")" = 401 ]
[ "$(code --cacert cert.pem -H 'Authorization: Bearer alice-token-0123456789' \
  "$S/v1/completions" -d '{"prompt": "dog", "max_tokens": 3}')" = 200 ]
! curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null 2>&1  # no plaintext
cat > wrong_key.mjs <<'JS'
import OpenAI from "openai";
const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "wrong-token-0123456789", maxRetries: 0 });
try {
  await client.completions.create({ model: "tiny-serve", prompt: "dog", max_tokens: 2 });
  throw new Error("a wrong key was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.AuthenticationError)) throw e;
}
console.log("openai client, wrong key: ok");
JS
NODE_EXTRA_CA_CERTS=cert.pem node wrong_key.mjs "$S"
kill -TERM "$PID"
wait "$PID"

# Flags: a bad one exits 2 with a message.
if "$SERVE" --checkpoint "$CKPT" --slots 0 2> bad.err; then exit 1; fi
grep -q -- '--slots' bad.err
echo "mesa-serve: all checks passed"
