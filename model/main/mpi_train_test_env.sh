# Sourced by the mesa-train tests under mpirun (mesa_train_dp_test, mesa_train_cp_test) from
# $TEST_TMPDIR, after BIN is set: OpenMPI as root on one machine over loopback TCP (MPIRUN, without
# -np), the collective timeout, and a small two-word corpus as token shards under data/.
#   source mpi_train_test_env.sh SEED
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Own session directory: concurrent mpiruns from parallel tests must not share /tmp/ompi.HOST.UID.
export OMPI_MCA_orte_tmpdir_base="${TEST_TMPDIR:-$(mktemp -d)}"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none
        --mca plm_rsh_agent false --mca btl self,tcp --mca btl_tcp_if_include lo
        --mca oob_tcp_if_include lo -x MESA_COLLECTIVE_TIMEOUT_S)
export MESA_COLLECTIVE_TIMEOUT_S=60

awk -v seed="$1" 'BEGIN { srand(seed); for (i = 0; i < 3000; i++) { n = int(rand() * 5); s = "";
      for (j = 0; j < 6; j++) s = s sprintf("%s%d ", (j % 2 ? "cat" : "dog"), (n + j) % 5);
      print s } }' > corpus.txt
"$BIN/mesa-data" --input corpus.txt --output_dir data --split line --val_fraction 0.1 \
  --shard_tokens 50000 > /dev/null
