#!/usr/bin/env bash
# On the GPU machine: where the Mesa and DeltaNet operators' time goes, kernel by kernel, at the
# training shape (B8 T2048) and at long context (B1 T32768), H16 D128 bf16 (issue 35's table).
# Each op is timed by its benchmark (CUDA events, median), then run once more under Nsight Compute
# for every kernel's duration (ncu --clock-control none: the clocks are left alone).
# Here: GPU_TARGETS="//bench:mesa_cuda_bench //bench:deltanet_cuda_bench" bash scripts/gpu/gpu_stage.sh DIR
# There: bash scripts/gpu/gpu_op_profile.sh DIR (carry [DIR]); logs to $OUT/profile.
set -uo pipefail
dir=${1:?staging folder}
out=${OUT:-/tmp}/profile
work=/tmp/op_profile
mkdir -p "$out" "$work"
tar xzf "$dir/gpu.tgz" -C "$work"
source scripts/gpu/gpu_jobs.sh
use_device_libs "$work/bin"
b=$work/bin
cat "$b/commit" > "$out/commit.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
[ "${NCU:-1}" = 0 ] && ncu=  # NCU=0: the benchmarks' timings only
[ "${NCU_SHAPE:-}" ] || NCU_SHAPE=any  # NCU_SHAPE="1 32768": ncu for that shape only
IFS='|' read -ra shapes <<< "${SHAPES:-8 2048|1 32768}"  # SHAPES="B T|B T": others
for shape in "${shapes[@]}"; do
  read -r B T <<< "$shape"
  "$b/mesa_cuda_bench" --B "$B" --T "$T" | tee "$out/mesa_B${B}_T${T}.txt"
  "$b/deltanet_cuda_bench" --B "$B" --T "$T" | tee "$out/deltanet_B${B}_T${T}.txt"
  if [ -n "$ncu" ] && { [ "$NCU_SHAPE" = any ] || [ "$NCU_SHAPE" = "$shape" ]; }; then
    timeout 100 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$b/mesa_cuda_bench" --B "$B" --T "$T" --reps 1 > "$out/ncu_mesa_B${B}_T${T}.csv" 2>&1
    timeout 100 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$b/deltanet_cuda_bench" --B "$B" --T "$T" --reps 1 > "$out/ncu_deltanet_B${B}_T${T}.csv" 2>&1
  fi
done
# Per kernel: the number of launches and the total time (ns) over the profiled run.
python3 - "$out" <<'PY'
import csv, glob, io, os, sys
from collections import defaultdict
for path in sorted(glob.glob(os.path.join(sys.argv[1], "ncu_*.csv"))):
    text = open(path).read()
    start = text.find('"ID"')
    if start < 0:
        print(os.path.basename(path), "no ncu table:", text.strip().splitlines()[-1:] )
        continue
    total, count = defaultdict(float), defaultdict(int)
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0].split("<")[0]
        total[name] += float(row["Metric Value"].replace(",", ""))
        count[name] += 1
    print("==", os.path.basename(path))
    for name, ns in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"  {ns / 1e6 / count[name]:9.4f} ms/launch x{count[name]:3d}  {name}")
PY
