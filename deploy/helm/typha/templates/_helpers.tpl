{{/* Labels every object carries. */}}
{{- define "typha.labels" -}}
app.kubernetes.io/name: typha
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/*
The server pods' selector. k8s-app is the label Calico's Typha Service selects
(k8s-app: calico-typha): with service.create=false the pods join that Service by it.
*/}}
{{- define "typha.serverSelector" -}}
app.kubernetes.io/name: typha
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
k8s-app: {{ .Values.service.name }}
{{- end }}

{{- define "typha.agentSelector" -}}
app.kubernetes.io/name: typha
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/*
Replicas: the value, else enough to carry cluster.nodes with one replica down. A replica is
sized for server.nodesPerReplica nodes (deploy/README.md, "Sizing"), so
ceil(nodes / nodesPerReplica) replicas carry the cluster and one more covers a failure. Small
clusters as Calico's: 1 for ≤ 2 nodes and 2 for ≤ 4 (the replicas use the host network, one
per node), and at least 3 above that, so that one replica drained and one failing still leave
one serving.
*/}}
{{- define "typha.replicas" -}}
{{- if .Values.server.replicas -}}
{{ .Values.server.replicas }}
{{- else -}}
{{- $n := int .Values.cluster.nodes -}}
{{- $per := int .Values.server.nodesPerReplica -}}
{{- if le $n 2 -}}1
{{- else if le $n 4 -}}2
{{- else -}}{{ max 3 (add (div (add $n (sub $per 1)) $per) 1) }}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
Memory request in MiB, from BENCHMARKS.md: about 256 MiB of base, 5.5 KiB per cached key
(every replica caches the whole cluster), 80 KiB per connected node, a replica holding Typha's
share of 1 + nodes × 1.2 / (replicas − 1).
*/}}
{{- define "typha.memoryMiB" -}}
{{- $n := int .Values.cluster.nodes -}}
{{- $r := int (include "typha.replicas" .) -}}
{{- $share := $n -}}
{{- if gt $r 1 }}{{ $share = add 1 (div (mul $n 12) (mul 10 (sub $r 1))) }}{{ end -}}
{{- $kib := add (div (mul $n (int .Values.cluster.kvsPerNode) 11) 2) (mul $share 80) -}}
{{- add 256 (div (add $kib 1023) 1024) -}}
{{- end }}

{{- define "typha.serverResources" -}}
{{- if .Values.server.resources -}}
{{ toYaml .Values.server.resources }}
{{- else -}}
{{- $mib := int (include "typha.memoryMiB" .) -}}
requests:
  cpu: 250m
  memory: {{ $mib }}Mi
# No CPU limit: throttling a fan-out server turns into every node's latency.
limits:
  memory: {{ mul $mib 2 }}Mi
{{- end -}}
{{- end }}

{{- define "typha.image" -}}
{{- $tag := .image.tag | default .appVersion -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/* Secret names holding tls.crt, tls.key and ca.crt for the server and the agents. */}}
{{- define "typha.serverTlsSecret" -}}
{{- if eq .Values.tls.source "existingSecret" -}}
{{ required "tls.existingSecret.server is required with tls.source=existingSecret" .Values.tls.existingSecret.server }}
{{- else -}}
{{ .Values.server.name }}-server-tls
{{- end -}}
{{- end }}

{{- define "typha.agentTlsSecret" -}}
{{- if eq .Values.tls.source "existingSecret" -}}
{{ required "tls.existingSecret.agent is required with tls.source=existingSecret" .Values.tls.existingSecret.agent }}
{{- else -}}
{{ .Values.server.name }}-agent-tls
{{- end -}}
{{- end }}

{{/*
The volume holding tls.crt, tls.key and ca.crt for the server (.role = "server") or the agent
("agent"), files of mode .mode: a Secret with all three, or with the Tigera operator's material (tls.source
calicoOperator) its Secret and its CA bundle ConfigMap projected into one directory. A
projected volume follows rotation as a Secret volume does.
*/}}
{{- define "typha.tlsVolume" -}}
{{- $v := .root.Values -}}
{{- if eq $v.tls.source "calicoOperator" -}}
projected:
  defaultMode: {{ .mode }}
  sources:
    - secret:
        name: {{ ternary $v.tls.calicoOperator.serverSecret $v.tls.calicoOperator.agentSecret (eq .role "server") }}
        items:
          - {key: tls.crt, path: tls.crt}
          - {key: tls.key, path: tls.key}
    - configMap:
        name: {{ $v.tls.calicoOperator.caConfigMap }}
        items:
          - {key: {{ $v.tls.calicoOperator.caKey }}, path: ca.crt}
{{- else -}}
secret:
  secretName: {{ ternary (include "typha.serverTlsSecret" .root) (include "typha.agentTlsSecret" .root) (eq .role "server") }}
  defaultMode: {{ .mode }}
{{- end }}
{{- end }}

{{/*
What decides the TLS material the pods read: a change here is a rollout. Rotated contents are
not: the server and the agents reload rotated files without a restart.
*/}}
{{- define "typha.tlsChecksum" -}}
{{- $d := dict "source" .Values.tls.source "server" (include "typha.serverTlsSecret" .) "agent" (include "typha.agentTlsSecret" .) "serverCN" .Values.tls.serverCN "clientCN" .Values.tls.clientCN "certManager" .Values.tls.certManager "calicoOperator" .Values.tls.calicoOperator -}}
{{- toJson $d | sha256sum -}}
{{- end }}

{{- define "typha.validate" -}}
{{- if not (has .Values.datastore.type (list "kubernetes" "etcdv3" "tier")) -}}
{{- fail (printf "datastore.type must be kubernetes, etcdv3 or tier, not %q" .Values.datastore.type) -}}
{{- end -}}
{{- if not (has .Values.tls.source (list "certManager" "existingSecret" "calicoOperator" "none")) -}}
{{- fail (printf "tls.source must be certManager, existingSecret, calicoOperator or none, not %q" .Values.tls.source) -}}
{{- end -}}
{{- if eq .Values.server.name .Values.service.name -}}
{{- fail (printf "server.name (%q) must not be the Service's name: Calico's own Typha objects are named %q" .Values.server.name .Values.service.name) -}}
{{- end -}}
{{- if not (has .Values.server.rebalancing (list "kubernetes" "none")) -}}
{{- fail (printf "server.rebalancing must be kubernetes or none, not %q" .Values.server.rebalancing) -}}
{{- end -}}
{{- if and (eq .Values.datastore.type "etcdv3") (not .Values.datastore.etcd.endpoints) -}}
{{- fail "datastore.etcd.endpoints is required with datastore.type=etcdv3" -}}
{{- end -}}
{{- if and (eq .Values.datastore.type "tier") (not .Values.datastore.tier.upstream) -}}
{{- fail "datastore.tier.upstream is required with datastore.type=tier" -}}
{{- end -}}
{{- end }}
