#!/usr/bin/env bash
# Scaling on one host with N GPUs (N = every visible GPU; not run in CI), for the scaling figures of docs/PERFORMANCE.md.
#
#   GPU_TARGETS="//coordinator:mesa-coordinator //worker:mesa-worker //cli:mesactl \
#     //model/main:mesa-train //bench:nccl_allreduce_bench" bash scripts/gpu/gpu_stage.sh   # here
#   bash scripts/gpu/gpu_scale_check.sh STAGED_TGZ                                        # there
#
# 1. all-reduce bus bandwidth, N ranks: ours (nccl_allreduce_bench under mpirun) and NCCL's through
#    PyTorch (bench/nccl_reference_allreduce.py), 1 MiB .. 1 GiB;
# 2. data parallel, MesaNet-small (examples/train_small_gpu.yaml, 8 x 2048 tokens per GPU): 1 GPU
#    vs N GPUs under mpirun, tokens/s and scaling;
# 3. data parallel, the paper's 1B shape (24 layers, d_model 2048, 16 heads x 128), ZeRO-1,
#    4 x 2048 tokens per GPU: 1 GPU vs N, tokens/s, scaling, peak memory per GPU; N GPUs with the
#    gradient all-reduce overlapped with the backward (the default) and blocking
#    (MESA_GRAD_BUCKET_MB=0: the reduce-scatter after the backward);
# 4. context parallelism, MesaNet-small on one sequence: 65,536 tokens on 1 GPU vs CP = N, and
#    131,072 tokens with CP = N (one GPU cannot hold it): tokens/s, peak memory;
# 5. through the service: two agents with N/2 GPUs each (`--gpus 0-1`, `--gpus 2-3`: two nodes'
#    stand-ins) and a job with gpus N, max_gpus_per_node N/2 (scripts/gpu/gpu_service_check.sh's
#    helpers): it must succeed, with tokens/s per rank, and end with the same loss as run 2's mpirun.
# Output under $OUT (default /tmp/gpu_check/scale); the summary is printed at the end.
# SCALE_PARTS="3" (a list of the numbers above; default all) runs only those parts.
set -uo pipefail
cd "$(dirname "$0")/../.."
tgz=${1:?usage: $0 STAGED_TGZ}
out=${OUT:-/tmp/gpu_check/scale}
rm -rf "$out" && mkdir -p "$out/x"
tar xzf "$tgz" -C "$out/x"
B=$out/x/bin
if ldconfig -p | grep -q 'libcurl.so.4 '; then rm -f "$out/x/lib/libcurl.so.4"; fi
source scripts/gpu/gpu_jobs.sh
use_device_libs "$B"
N=$(nvidia-smi -L | wc -l)
date -u; nvidia-smi -L
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MESA_COLLECTIVE_TIMEOUT_S=300
mpi=(mpirun -np "$N" --oversubscribe --allow-run-as-root --bind-to none
     -x LD_LIBRARY_PATH -x MESA_COLLECTIVE_TIMEOUT_S)
data=$out/data
python3 scripts/synthetic_shards.py "$data" 4000000 200000 > /dev/null
part() { case " ${SCALE_PARTS:-1 2 3 4 5} " in *" $1 "*) return 0 ;; esac; return 1; }

if part 1; then
echo "== 1. all-reduce, $N ranks"
timeout 120 "${mpi[@]}" "$B/nccl_allreduce_bench" --iters 10 > "$out/bench.log" 2>&1
echo "ours rc=$?"
timeout 120 python3 bench/nccl_reference_allreduce.py --gpus "$N" --iters 10 > "$out/torch.log" 2>&1
echo "torch rc=$?"
python3 - "$out/bench.log" "$out/torch.log" <<'PY'
import re, sys
def table(path, name):
    t = {}
    for line in open(path):
        m = re.match(r"RESULT %s bytes=(\d+) .*?busbw_GBs=([\d.]+)" % name, line)
        if m: t[int(m.group(1))] = float(m.group(2))
    return t
ours, ref = table(sys.argv[1], "allreduce"), table(sys.argv[2], "torch_nccl_allreduce")
for b in sorted(ours):
    r = ref.get(b)
    print("  %10d B  ours %7.1f GB/s  NCCL(torch) %s  %s" % (b, ours[b], "%7.1f" % r if r else "   n/a",
          "%5.1f%%" % (100 * ours[b] / r) if r else ""))
PY
fi

# job NAME GLOBAL_BATCH ZERO STEPS [SEQ CP]: MesaNet-small spec; the 1B shape via BIG=1.
job() {
  small_job "$data" "$out/ckpt-$1" "$2" "$3" "$4" "$out/$1.yaml"
  if [ -n "${5:-}" ]; then
    sed -i -e "s|seq_len: 2048|seq_len: $5|" -e "s|warmup_steps: 10|warmup_steps: 2|" \
           -e "s|log_interval: 5|log_interval: 1\n  context_parallel: $6|" "$out/$1.yaml"
  fi
  if [ "${BIG:-0}" = 1 ]; then
    sed -i -e "s|d_model: 768|d_model: 2048|" -e "s|n_layers: 14|n_layers: 24|" \
           -e "s|n_heads: 6|n_heads: 16|" "$out/$1.yaml"
  fi
}
memwatch() {
  while true; do nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >> "$1"; sleep 0.5; done
}
run1() {  # NAME: one GPU
  memwatch "$out/$1.mem" & local w=$!
  timeout 300 "$B/mesa-train" --config "$out/$1.yaml" --workdir "$out/$1" --device cuda \
    --events_file "$out/$1.jsonl" > "$out/$1.log" 2>&1; echo "$1 rc=$?"; kill $w
  grep "model mesa\|done:" "$out/$1.log" | cut -c1-160
}
runN() {  # NAME: N GPUs under mpirun (MESA_GRAD_BUCKET_MB passed on when set)
  memwatch "$out/$1.mem" & local w=$!
  timeout 300 "${mpi[@]}" sh -c "exec env ${MESA_GRAD_BUCKET_MB:+MESA_GRAD_BUCKET_MB=$MESA_GRAD_BUCKET_MB} $B/mesa-train --config $out/$1.yaml --workdir $out/$1 \
    --device cuda --events_file $out/$1.rank\$OMPI_COMM_WORLD_RANK.jsonl" > "$out/$1.log" 2>&1
  echo "$1 rc=$?"; kill $w; grep "done:" "$out/$1.log" | head -1 | cut -c1-160
}

if part 2; then
echo "== 2. data parallel, MesaNet-small"
job s1 8 0 25; job sN $((8 * N)) 0 25
run1 s1; runN sN
fi
if part 3; then
echo "== 3. data parallel, 1B shape, ZeRO-1"
BIG=1 job b1 4 1 20; BIG=1 job bN $((4 * N)) 1 20; BIG=1 job bNb $((4 * N)) 1 20
run1 b1; runN bN; MESA_GRAD_BUCKET_MB=0 runN bNb
fi
if part 4; then
echo "== 4. context parallelism, MesaNet-small, one sequence"
job c1 1 0 8 65536 1; job cN 1 0 8 65536 "$N"; job cN128 1 0 8 131072 "$N"
run1 c1; runN cN; runN cN128
fi

if part 5; then
echo "== 5. through the service: two agents, $((N / 2)) GPUs each"
port=$((20000 + RANDOM % 20000))
export MESA_SERVER=127.0.0.1:$port
mkdir -p "$out/svc"
"$B/mesa-coordinator" --listen "$MESA_SERVER" --metrics_listen 127.0.0.1:0 --db "$out/svc/coord.db" \
  --checkpoint_root "$out" --data_roots "$data" > "$out/svc/coordinator.log" 2>&1 &
coordinator=$!
sleep 2
half=$((N / 2))
"$B/mesa-worker" --coordinator "$MESA_SERVER" --worker_id nodeA --gpus "0-$((half - 1))" \
  --workdir "$out/svc/A" --checkpoint_root "$out" --trainer "$B/mesa-train" \
  --metrics_listen 127.0.0.1:9481 --advertise_host 127.0.0.1 > "$out/svc/A.log" 2>&1 &
wa=$!
"$B/mesa-worker" --coordinator "$MESA_SERVER" --worker_id nodeB --gpus "$half-$((N - 1))" \
  --workdir "$out/svc/B" --checkpoint_root "$out" --trainer "$B/mesa-train" \
  --metrics_listen 127.0.0.1:9482 --advertise_host 127.0.0.1 > "$out/svc/B.log" 2>&1 &
wb=$!
sleep 3
"$B/mesactl" workers
job span $((8 * N)) 0 25
sed -i -e "s|  gpus: 1|  gpus: $N\n  max_gpus_per_node: $half|" "$out/span.yaml"
id=$("$B/mesactl" submit "$out/span.yaml" -o name | sed 's|^job/||')
echo "submitted $id"
for _ in $(seq 150); do
  state=$("$B/mesactl" get "$id" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case $state in *SUCCEEDED|*FAILED|*CANCELLED) break ;; esac
  sleep 1
done
"$B/mesactl" get "$id" -o json > "$out/svc/span.json"
"$B/mesactl" logs "$id" > "$out/svc/span.log"
grep "agent\]" "$out/svc/span.log" | head -4 | cut -c1-200
[ "${state:-}" = JOB_STATE_SUCCEEDED ] || { "$B/mesactl" explain "$id"; tail -5 "$out/svc/span.log"; }
kill -TERM $wa $wb; wait $wa $wb 2>/dev/null; kill $coordinator
fi

echo; echo "================ summary ($N GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)) ================"
python3 - "$out" "$N" <<'PY'
import json, re, sys
out, n = sys.argv[1], int(sys.argv[2])
def steps(path):
    try:
        return {int(e["step"]["step"]): e["step"] for e in map(json.loads, open(path)) if "step" in e}
    except OSError:
        return {}
def tps(path, first):
    v = [e["tokens_per_second"] for k, e in steps(path).items() if k > first and not e["skipped"]]
    return sum(v) / len(v) if v else float("nan")
def peak(path):
    m = {}
    try:
        for line in open(path):
            i, used = (int(f) for f in line.split(","))
            m[i] = max(m.get(i, 0), used)
    except (OSError, ValueError):
        pass
    return max(m.values()) if m else float("nan")
def last_loss(path):
    s = steps(path)
    return s[max(s)]["loss"] if s else float("nan")
for name, a, b, first, target in (("MesaNet-small DP", "s1", "sN", 10, {4: 3.8, 8: 7.5}.get(n)),
                                  ("1B shape DP ZeRO-1", "b1", "bN", 10, {4: 3.8, 8: 7.5}.get(n)),
                                  ("1B ZeRO-1 blocking", "b1", "bNb", 10, None),
                                  ("CP 65,536 tokens", "c1", "cN", 2, None)):
    t1, tn = tps("%s/%s.jsonl" % (out, a), first), tps("%s/%s.rank0.jsonl" % (out, b), first)
    print("%-20s 1 GPU %9.0f tok/s | %d GPUs %9.0f tok/s | %.3fx%s | peak MiB 1 GPU %s, %d GPUs %s (max per GPU)" % (
        name, t1, n, tn, tn / t1, " (target >= %.1fx)" % target if target else "", peak("%s/%s.mem" % (out, a)),
        n, peak("%s/%s.mem" % (out, b))))
print("CP 131,072 tokens    %d GPUs %9.0f tok/s | peak MiB per GPU %s" % (
    n, tps(out + "/cN128.rank0.jsonl", 2), peak(out + "/cN128.mem")))
try:
    job = json.load(open(out + "/svc/span.json"))
    r = job.get("result", {})
    rates = {}
    for line in open(out + "/svc/span.log"):
        m = re.match(r"\[rank (\d+) \w+\] \[mesa-train\] step (\d+)/\d+ .* ([\d.]+) tok/s", line)
        if m and int(m.group(2)) > 10:
            rates.setdefault(int(m.group(1)), []).append(float(m.group(3)))
    print("service span job: %s on %s, final_loss %s (mpirun run 2: %.6f); tok/s per rank %s" % (
        job.get("state"), job.get("workers"), r.get("final_loss"), last_loss(out + "/sN.rank0.jsonl"),
        {k: round(sum(v) / len(v)) for k, v in sorted(rates.items())}))
except (OSError, ValueError) as e:
    print("service span job: no result (%s)" % e)
PY
