#!/usr/bin/env bash
# GPU jobs through the service on a machine with 2+ GPUs (not run in CI): the real coordinator,
# worker agents and mesactl, MesaNet-small (examples/train_small_gpu.yaml) on synthetic shards.
#
#   GPU_TARGETS="//coordinator:mesa-coordinator //worker:mesa-worker //cli:mesactl \
#     //model/main:mesa-train" bash scripts/gpu/gpu_stage.sh      # here; copy .device/gpu.tgz
#   bash scripts/gpu/gpu_service_check.sh STAGED_TGZ             # on the GPU machine
#
# 1. span:  two agents on one host, `--gpus 0` and `--gpus 1` (each stands in for a node), and a
#           job with `gpus: 2, max_gpus_per_node: 1`: one rank on each agent; the NCCL unique id goes
#           from rank 0's agent to rank 1's through the coordinator's rendezvous.
# 2. node:  one agent offering both GPUs, the same job with `max_gpus_per_node: 2`: both ranks on it.
# Each must SUCCEED; the two must end with the same losses (same spec and seed, same global batch;
# bf16 and NCCL summation order allow a small difference, printed). Tokens/s per rank from the
# trainers' events. Output under $OUT (default /tmp/gpu_check/service); summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
tgz=${1:?usage: $0 STAGED_TGZ}
out=${OUT:-/tmp/gpu_check/service}
steps=${STEPS:-60}
rm -rf "$out/svc" && mkdir -p "$out/svc"
work=$out/svc
mkdir -p "$work/x" && tar xzf "$tgz" -C "$work/x"
bin=$work/x/bin
# Debian's libcurl needs Debian's LDAP/SASL sonames; a system libcurl.so.4 (same ABI) is better.
if ldconfig -p | grep -q 'libcurl.so.4 '; then rm -f "$work/x/lib/libcurl.so.4"; fi
source scripts/gpu/gpu_jobs.sh
use_device_libs "$bin"
python3 scripts/synthetic_shards.py "$work/data" 4000000 200000 > /dev/null
nvidia-smi --query-gpu=index,name --format=csv,noheader

port=$((20000 + RANDOM % 20000))
server=127.0.0.1:$port
export MESA_SERVER=$server
mkdir -p "$work/ckpt"
"$bin/mesa-coordinator" --listen "$server" --metrics_listen 127.0.0.1:0 --db "$work/coord.db" \
  --checkpoint_root "$work/ckpt" --data_roots "$work/data" > "$work/coordinator.log" 2>&1 &
coordinator=$!
# Up within 20 s, else its log says why (a missing library, a flag) and nothing else is tried.
for _ in $(seq 100); do
  "$bin/mesactl" workers > /dev/null 2>&1 && break
  kill -0 $coordinator 2>/dev/null || break
  sleep 0.2
done
if ! "$bin/mesactl" workers > /dev/null 2>&1; then
  echo "coordinator did not come up:"; tail -20 "$work/coordinator.log"
  ldd "$bin/mesa-coordinator" "$bin/mesa-worker" | grep "not found"
  exit 1
fi
agents=()
start_agent() {  # NAME GPUS METRICS_PORT
  "$bin/mesa-worker" --coordinator "$server" --worker_id "$1" --gpus "$2" \
    --workdir "$work/$1" --checkpoint_root "$work/ckpt" --trainer "$bin/mesa-train" \
    --metrics_listen "127.0.0.1:$3" --advertise_host 127.0.0.1 --collective_timeout 120s \
    > "$work/$1.log" 2>&1 &
  agents+=($!)
}
stop_agents() {
  for p in "${agents[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${agents[@]}"; do wait "$p" 2>/dev/null; done
  agents=()
}
trap 'stop_agents; kill $coordinator 2>/dev/null' EXIT

# job NAME MAX_GPUS_PER_NODE: the spec file for one layout.
job() {
  small_job "$work/data" "$work/ckpt/$1" 16 0 "$steps" "$work/$1.yaml"
  sed -i -e "s|  gpus: 1|  gpus: 2\n  max_gpus_per_node: $2|" -e "s|^name: .*|name: $1|" "$work/$1.yaml"
}
# run_job NAME: submits, waits for a final state (bounded), prints the summary line.
run_job() {
  local id state deadline=$((SECONDS + 420))
  id=$("$bin/mesactl" submit "$work/$1.yaml" -o name | sed 's|^job/||')
  echo "$1: submitted $id"
  while :; do
    state=$("$bin/mesactl" get "$id" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $state in *SUCCEEDED|*FAILED|*CANCELLED) break ;; esac
    [ $SECONDS -gt $deadline ] && { echo "$1: still $state after 420 s"; break; }
    if [ "$state" = JOB_STATE_QUEUED ] && [ $SECONDS -gt $((deadline - 360)) ]; then
      echo "$1: still queued after 60 s:"; "$bin/mesactl" explain "$id"; "$bin/mesactl" workers; break
    fi
    kill -0 $coordinator 2>/dev/null || { echo "coordinator exited:"; tail -20 "$work/coordinator.log"; exit 1; }
    sleep 2
  done
  "$bin/mesactl" get "$id" -o json > "$work/$1.job.json"
  python3 - "$1" "$work/$1.job.json" <<'EOF'
import json, sys
job = json.load(open(sys.argv[2]))
r = job.get("result", {})
print("%s: state %s, final_loss %s, val_loss %s, attempts %s, workers %s" % (
    sys.argv[1], job.get("state"), r.get("final_loss"), r.get("val_loss"),
    job.get("attempts"), job.get("workers")))
EOF
  # Tokens/s of each rank: the trainers' step lines in the job's log, after step 10 (the first steps
  # include cuBLASLt planning and allocation).
  "$bin/mesactl" logs "$id" > "$work/$1.job.log"
  python3 - "$work/$1.job.log" <<'EOF'
import re, sys
rates = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[rank (\d+) \w+\] \[mesa-train\] step (\d+)/\d+ .* ([\d.]+) tok/s", line)
    if m and int(m.group(2)) > 10:
        rates.setdefault(int(m.group(1)), []).append(float(m.group(3)))
for rank, v in sorted(rates.items()):
    print("   rank %d: %.0f tokens/s (mean of %d step lines after step 10)" % (rank, sum(v) / len(v), len(v)))
agent = [l.rstrip() for l in open(sys.argv[1]) if "agent]" in l][:4]
print("\n".join("   " + l for l in agent))
EOF
}

echo "== span: two agents (--gpus 0, --gpus 1), job gpus 2, max_gpus_per_node 1"
start_agent gpu0 0 9471
start_agent gpu1 1 9472
sleep 3
"$bin/mesactl" workers
for i in 0 1; do
  kill -0 "${agents[$i]}" 2>/dev/null || { echo "agent gpu$i exited:"; tail -5 "$work/gpu$i.log"; }
done
job span 1
run_job span
grep -h "rendezvous\|Rendezvous" "$work/gpu0.log" "$work/gpu1.log" | head -6
stop_agents

echo "== node: one agent (--gpus 0,1), job gpus 2, max_gpus_per_node 2"
start_agent both 0,1 9473
sleep 3
"$bin/mesactl" workers
job node 2
run_job node

python3 - "$work/span.job.json" "$work/node.job.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)).get("result", {}) for p in sys.argv[1:3])
for k in ("final_loss", "val_loss"):
    if k in a and k in b:
        print("span vs node %s: %.6f vs %.6f (|diff| %.2e)" % (k, a[k], b[k], abs(a[k] - b[k])))
EOF
echo "== logs: $work (coordinator.log, gpu0.log, gpu1.log, both.log)"
tail -3 "$work/coordinator.log"
