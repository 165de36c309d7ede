// Validates a rendered kustomization (`kustomize build` output) for //deploy:manifests_test:
// every object against its Kubernetes 1.3x or prometheus-operator schema (kubernetes-models),
// then the properties docs/operations.md promises. Prints each problem; exits 1 if any.
// Usage: node validate.mjs TOOLS_DIR REPO_ROOT RENDERED.yaml EXPECT_JSON
//   EXPECT_JSON: {"storageClasses": bool, "prometheusOperator": bool, "gpuCounts": [8, ...]}
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { isDeepStrictEqual } from 'node:util';

const [toolsDir, repo, rendered, expectJson] = process.argv.slice(2);
const expect = JSON.parse(expectJson);
const require = createRequire(path.join(toolsDir, 'package.json'));
const YAML = require('yaml');
const modules = path.join(toolsDir, 'node_modules');
const problems = [];
const fail = (obj, text) => problems.push(`${obj ? `${obj.kind}/${obj.metadata?.name}: ` : ''}${text}`);

// The model class of apiVersion/kind: kubernetes-models for the core groups, its
// prometheus-operator package for monitoring.coreos.com and cert-manager package for
// cert-manager.io.
async function modelOf(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const pkg = group === 'monitoring.coreos.com' ? '@kubernetes-models/prometheus-operator'
    : group === 'cert-manager.io' ? '@kubernetes-models/cert-manager' : 'kubernetes-models';
  const file = path.join(modules, pkg, group || '', version, `${kind}.js`);
  if (!fs.existsSync(file)) return null;
  return (await import(file))[kind];
}

const objects = YAML.parseAllDocuments(fs.readFileSync(rendered, 'utf8')).map((d) => d.toJS()).filter(Boolean);
if (objects.length === 0) fail(null, 'nothing rendered');
for (const obj of objects) {
  const Model = await modelOf(obj.apiVersion, obj.kind);
  if (!Model) { fail(obj, `no schema for ${obj.apiVersion} ${obj.kind}`); continue; }
  try { new Model(obj).validate(); } catch (e) { fail(obj, `schema: ${e.message}`); }
}

const byKind = (kind) => objects.filter((o) => o.kind === kind);
const named = (kind, name) => objects.find((o) => o.kind === kind && o.metadata.name === name);
const workloads = [...byKind('Deployment'), ...byKind('DaemonSet')];

// Every pod runs as the image's user and can write its volumes (fsGroup).
for (const w of workloads) {
  const pod = w.spec.template.spec;
  const sc = pod.securityContext ?? {};
  for (const [k, v] of [['runAsUser', 10001], ['runAsGroup', 10001], ['fsGroup', 10001], ['runAsNonRoot', true]]) {
    if (sc[k] !== v) fail(w, `pod securityContext.${k} is ${sc[k]}, want ${v}`);
  }
  for (const c of pod.containers) {
    if (!c.image || c.image === 'mesanet') fail(w, `container ${c.name}: image "${c.image}" not set by the images transformer`);
  }
  for (const v of pod.volumes ?? []) {
    const claim = v.persistentVolumeClaim?.claimName;
    if (claim && !named('PersistentVolumeClaim', claim)) fail(w, `volume ${v.name}: claim ${claim} is not rendered`);
  }
}

// The coordinator. On SQLite (--db a file): one replica, Recreate (never two on the store), gRPC
// probes on --health_listen, the store a ReadWriteOnce claim. Replicated (--db a postgresql://
// URI, deploy/components/replicated-coordinators): two or more replicas with --leader_lease;
// readiness a gRPC probe on --health_listen (only the leader listens: the Service follows it),
// liveness and startup an httpGet of /metrics on --metrics_listen (followers serve it; a gRPC
// liveness probe would restart every follower forever).
const coordinator = named('Deployment', 'mesa-coordinator');
if (!coordinator) {
  fail(null, 'no Deployment mesa-coordinator');
} else {
  const c = coordinator.spec.template.spec.containers[0];
  const arg = (name) => (c.args ?? []).find((a) => a.startsWith(`--${name}=`))?.split('=').slice(1).join('=');
  const port = Number((arg('health_listen') ?? '').split(':').pop());
  const replicated = /^postgres(ql)?:\/\//.test(arg('db') ?? '');
  if (!replicated) {
    if (coordinator.spec.replicas !== 1) fail(coordinator, `replicas ${coordinator.spec.replicas}, want 1`);
    if (coordinator.spec.strategy?.type !== 'Recreate') fail(coordinator, 'strategy is not Recreate');
    for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
      if (c[probe]?.grpc?.port !== port) fail(coordinator, `${probe} is not a gRPC probe on the --health_listen port (${port})`);
    }
    const store = coordinator.spec.template.spec.volumes.find((v) => v.name === 'store');
    const claim = store && named('PersistentVolumeClaim', store.persistentVolumeClaim?.claimName);
    if (!claim || !claim.spec.accessModes.includes('ReadWriteOnce')) fail(coordinator, 'store is not a ReadWriteOnce claim');
  } else {
    if (!(coordinator.spec.replicas >= 2)) fail(coordinator, `replicas ${coordinator.spec.replicas}, want >= 2 on PostgreSQL`);
    const lease = arg('leader_lease');
    if (!lease || /^0+(s|ms)?$/.test(lease)) fail(coordinator, 'replicas on PostgreSQL without --leader_lease (each would lead)');
    if (c.readinessProbe?.grpc?.port !== port) fail(coordinator, `readinessProbe is not a gRPC probe on the --health_listen port (${port})`);
    const metrics = Number((arg('metrics_listen') ?? '').split(':').pop());
    for (const probe of ['startupProbe', 'livenessProbe']) {
      const get = c[probe]?.httpGet;
      if (get?.path !== '/metrics' || Number(get?.port) !== metrics) {
        fail(coordinator, `${probe} is not an httpGet of /metrics on the --metrics_listen port (${metrics}): followers do not listen for gRPC`);
      }
    }
  }
}

// Workers: the GPU request is the node's count (nodeSelector nvidia.com/gpu.count); CPU-only
// workers request none and run with --gpus=none. One DaemonSet per count, selectors disjoint.
const counts = [];
for (const ds of byKind('DaemonSet')) {
  const pod = ds.spec.template.spec;
  const c = pod.containers[0];
  const gpus = c.resources?.limits?.['nvidia.com/gpu'];
  const nodeCount = pod.nodeSelector?.['nvidia.com/gpu.count'];
  const label = ds.spec.selector.matchLabels['mesanet.io/gpus-per-node'];
  if (gpus === undefined) {
    if (!(c.args ?? []).includes('--gpus=none')) fail(ds, 'requests no GPU but does not run with --gpus=none');
    if (nodeCount !== undefined) fail(ds, 'selects nodes by GPU count but requests no GPU');
    counts.push(0);
  } else {
    if (String(gpus) !== nodeCount) fail(ds, `requests ${gpus} GPUs on nodes with nvidia.com/gpu.count=${nodeCount}`);
    if (c.resources?.requests?.['nvidia.com/gpu'] !== undefined && c.resources.requests['nvidia.com/gpu'] !== gpus) fail(ds, 'GPU request differs from its limit');
    counts.push(Number(gpus));
  }
  if (label !== String(counts.at(-1))) fail(ds, `selector label mesanet.io/gpus-per-node=${label}, want ${counts.at(-1)}`);
}
if (!isDeepStrictEqual([...counts].sort(), [...expect.gpuCounts].sort())) fail(null, `worker GPU counts ${counts}, want ${expect.gpuCounts}`);
// Workers follow their node's cordon (--kubernetes_node=$(NODE_NAME), NODE_NAME from the pod's
// spec.nodeName) with a ServiceAccount bound to a ClusterRole that may get nodes.
const mayGetNodes = (sa, namespace) => byKind('ClusterRoleBinding').some((b) =>
  (b.subjects ?? []).some((s) => s.kind === 'ServiceAccount' && s.name === sa && s.namespace === namespace) &&
  b.roleRef.kind === 'ClusterRole' &&
  (named('ClusterRole', b.roleRef.name)?.rules ?? []).some((r) =>
    (r.apiGroups ?? []).includes('') && (r.resources ?? []).includes('nodes') &&
    ((r.verbs ?? []).includes('get') || (r.verbs ?? []).includes('*'))));
for (const ds of byKind('DaemonSet')) {
  const pod = ds.spec.template.spec;
  const c = pod.containers[0];
  if (!(c.args ?? []).includes('--kubernetes_node=$(NODE_NAME)')) fail(ds, 'does not run with --kubernetes_node=$(NODE_NAME)');
  const env = (c.env ?? []).find((e) => e.name === 'NODE_NAME');
  if (env?.valueFrom?.fieldRef?.fieldPath !== 'spec.nodeName') fail(ds, 'NODE_NAME is not the fieldRef spec.nodeName');
  const sa = pod.serviceAccountName;
  if (!sa || !named('ServiceAccount', sa)) fail(ds, `serviceAccountName ${sa ?? '(unset)'} is not a rendered ServiceAccount`);
  else if (!mayGetNodes(sa, ds.metadata.namespace)) fail(ds, `ServiceAccount ${sa} may not get nodes (no ClusterRoleBinding to such a ClusterRole)`);
  if (pod.automountServiceAccountToken === false) fail(ds, 'automountServiceAccountToken is false: no token to read the Node with');
  // One identity per pod: --worker_id is the pod's name, and the client certificate mounted for
  // --tls_cert is issued per pod (cert-manager csi-driver) with that name as its CN. A Secret
  // (or any certificate shared by the pods) names one worker only: the coordinator refuses every
  // other pod presenting it, so a second node could not join.
  if (!(c.args ?? []).includes('--worker_id=$(POD_NAME)')) fail(ds, 'does not run with --worker_id=$(POD_NAME)');
  const podName = (c.env ?? []).find((e) => e.name === 'POD_NAME');
  if (podName?.valueFrom?.fieldRef?.fieldPath !== 'metadata.name') fail(ds, 'POD_NAME is not the fieldRef metadata.name');
  const certArg = (c.args ?? []).find((a) => a.startsWith('--tls_cert='));
  const mount = certArg && (c.volumeMounts ?? []).find((m) => certArg.slice('--tls_cert='.length).startsWith(`${m.mountPath}/`));
  const volume = mount && (pod.volumes ?? []).find((v) => v.name === mount.name);
  if (!volume) fail(ds, '--tls_cert is not on a mounted volume');
  else if (volume.csi?.driver !== 'csi.cert-manager.io') fail(ds, `the certificate volume ${volume.name} is not issued per pod (csi.cert-manager.io): every pod would present the same certificate`);
  else if (volume.csi.volumeAttributes?.['csi.cert-manager.io/common-name'] !== '${POD_NAME}') fail(ds, `the certificate's CN is ${volume.csi.volumeAttributes?.['csi.cert-manager.io/common-name']}, not the pod's name (\${POD_NAME}) that --worker_id is`);
  else if (!(volume.csi.volumeAttributes?.['csi.cert-manager.io/key-usages'] ?? '').split(',').includes('client auth')) fail(ds, 'the certificate is not for client auth');
  else if (!named(volume.csi.volumeAttributes?.['csi.cert-manager.io/issuer-kind'] ?? 'Issuer', volume.csi.volumeAttributes?.['csi.cert-manager.io/issuer-name'])) fail(ds, `the certificate's issuer ${volume.csi.volumeAttributes?.['csi.cert-manager.io/issuer-name']} is not rendered`);
  // The scheduler leaves the agent and its trainers' host work room on the node.
  for (const r of ['cpu', 'memory']) {
    if (c.resources?.requests?.[r] === undefined) fail(ds, `requests no ${r}`);
  }
}
// The coordinator's server certificate: a rendered Certificate writes the Secret it mounts, from
// the Issuer that also signs the workers (its ca.crt is then the CA of the workers' certificates,
// the coordinator's --client_ca), naming the Service workers dial.
if (coordinator) {
  const tls = coordinator.spec.template.spec.volumes.find((v) => v.name === 'tls')?.secret?.secretName;
  const cert = byKind('Certificate').find((c) => c.spec.secretName === tls);
  const workerIssuers = new Set(byKind('DaemonSet').map((ds) => (ds.spec.template.spec.volumes ?? []).find((v) => v.csi?.driver === 'csi.cert-manager.io')?.csi.volumeAttributes?.['csi.cert-manager.io/issuer-name']));
  if (!cert) fail(coordinator, `no Certificate writes its TLS Secret ${tls}`);
  else {
    if (!named(cert.spec.issuerRef.kind ?? 'Issuer', cert.spec.issuerRef.name)) fail(cert, `issuer ${cert.spec.issuerRef.name} is not rendered`);
    if (!workerIssuers.has(cert.spec.issuerRef.name)) fail(cert, `issued by ${cert.spec.issuerRef.name}, not by the workers' issuer: the coordinator's ca.crt would not trust them`);
    if (!(cert.spec.dnsNames ?? []).includes('mesa-coordinator')) fail(cert, 'does not name mesa-coordinator, the address workers dial');
    if (!(cert.spec.usages ?? []).includes('server auth')) fail(cert, 'not for server auth');
  }
}

// NetworkPolicies: every workload's pods are selected by one; the coordinator's gRPC port is open
// to all (TLS and tokens guard it), the workers accept every port from each other (NCCL picks
// ports at run time), PostgreSQL only from the coordinators; named ports exist on the pods.
const policiesFor = (labels) => byKind('NetworkPolicy').filter((np) =>
  Object.entries(np.spec.podSelector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v));
const fromPods = (rule, name) => (rule.from ?? []).some((f) => f.podSelector?.matchLabels?.['app.kubernetes.io/name'] === name && !f.namespaceSelector);
for (const w of [...workloads, ...byKind('StatefulSet')]) {
  const labels = w.spec.template.metadata.labels;
  const name = labels['app.kubernetes.io/name'];
  const policies = policiesFor(labels);
  if (policies.length === 0) { fail(w, 'no NetworkPolicy selects its pods'); continue; }
  const rules = policies.flatMap((np) => np.spec.ingress ?? []);
  const ports = new Set(w.spec.template.spec.containers.flatMap((c) => (c.ports ?? []).flatMap((p) => [p.name, p.containerPort])));
  for (const r of rules) {
    for (const p of r.ports ?? []) if (!ports.has(p.port)) fail(w, `a NetworkPolicy names port ${p.port}, which its pods do not have`);
  }
  const opens = (port, rule) => (rule.ports ?? []).some((p) => p.port === port);
  if (name === 'mesa-coordinator' && !rules.some((r) => !r.from && opens('grpc', r))) fail(w, 'NetworkPolicy does not open the gRPC port to workers and users');
  if (name === 'mesa-worker' && !rules.some((r) => !r.ports && fromPods(r, 'mesa-worker'))) fail(w, 'NetworkPolicy does not let worker pods reach each other on every port (NCCL)');
  if (name === 'mesa-postgres' && !rules.every((r) => fromPods(r, 'mesa-coordinator'))) fail(w, 'NetworkPolicy lets more than the coordinators reach PostgreSQL');
}

const pdb = named('PodDisruptionBudget', 'mesa-worker');
if (!pdb || pdb.spec.selector.matchLabels['app.kubernetes.io/name'] !== 'mesa-worker') fail(null, 'no PodDisruptionBudget for the workers');

// mesa-serve, where an overlay has it: readiness is /healthz on its plaintext --metrics_port (503
// while draining), and the drain fits in the grace period.
const serve = named('Deployment', 'mesa-serve');
if (serve) {
  const pod = serve.spec.template.spec;
  const c = pod.containers[0];
  const flag = (name) => (c.args ?? []).find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  const probe = c.readinessProbe?.httpGet;
  const port = (c.ports ?? []).find((p) => p.name === probe?.port)?.containerPort ?? probe?.port;
  if (probe?.path !== '/healthz' || flag('metrics_port') === undefined || Number(flag('metrics_port')) !== port) {
    fail(serve, 'readinessProbe is not an httpGet of /healthz on the --metrics_port');
  }
  if (Number(flag('drain_seconds') ?? 30) >= (pod.terminationGracePeriodSeconds ?? 30)) {
    fail(serve, '--drain_seconds does not fit in terminationGracePeriodSeconds');
  }
}

// Storage classes: set by the overlay where it says so, else left to the cluster's default.
for (const pvc of byKind('PersistentVolumeClaim')) {
  if (expect.storageClasses !== (pvc.spec.storageClassName !== undefined)) {
    fail(pvc, `storageClassName ${pvc.spec.storageClassName ?? '(unset)'}, expected ${expect.storageClasses ? 'set' : 'unset'}`);
  }
}

// prometheus-operator: the rules are dashboards/prometheus/rules.yaml's; the job names the
// alerts select are those the monitors produce.
const rule = named('PrometheusRule', 'mesanet');
if (expect.prometheusOperator) {
  const want = YAML.parse(fs.readFileSync(path.join(repo, 'dashboards/prometheus/rules.yaml'), 'utf8')).groups;
  if (!rule || !isDeepStrictEqual(rule.spec.groups, want)) fail(rule, 'groups differ from dashboards/prometheus/rules.yaml');
  const jobs = new Set();
  for (const m of [...byKind('ServiceMonitor'), ...byKind('PodMonitor')]) {
    const target = m.kind === 'ServiceMonitor' ? named('Service', m.spec.selector.matchLabels['app.kubernetes.io/name'])
      : workloads.find((w) => w.spec.template.metadata.labels['app.kubernetes.io/name'] === m.spec.selector.matchLabels['app.kubernetes.io/name'])?.spec.template.metadata;
    const job = target?.labels?.[m.spec.jobLabel] ?? target?.metadata?.labels?.[m.spec.jobLabel];
    if (!job) fail(m, `selects nothing that carries its jobLabel ${m.spec.jobLabel}`); else jobs.add(job);
  }
  for (const match of JSON.stringify(want).matchAll(/job=\\"([^\\"]+)\\"/g)) {
    if (!jobs.has(match[1])) fail(null, `the rules select job="${match[1]}" but no monitor scrapes it`);
  }
  const dashboards = byKind('ConfigMap').filter((m) => m.metadata.labels?.grafana_dashboard === '1');
  const files = fs.readdirSync(path.join(repo, 'dashboards/grafana')).filter((f) => f.endsWith('.json'));
  if (dashboards.length !== files.length) fail(null, `${dashboards.length} dashboard ConfigMaps for ${files.length} dashboards`);
} else if (rule) {
  fail(rule, 'prometheus-operator objects in an overlay without the component');
}

for (const p of problems) console.error(`  ${p}`);
console.log(`${objects.length} objects, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
