{{/* Labels every object of the chart carries. */}}
{{- define "topolet.labels" -}}
app.kubernetes.io/name: topolet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ (.Values.image.tag | default .Chart.AppVersion) | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The image reference. */}}
{{- define "topolet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The DaemonSets to render: the default one ("" pool: every node not in a pool) and one per
.Values.nodePools entry. Each: name (object name suffix), pool, config, nodeSelector, tolerations,
resources. A list of dicts, as JSON (templates can only return strings).
*/}}
{{- define "topolet.pools" -}}
{{- $pools := list -}}
{{- $names := list -}}
{{- range .Values.nodePools -}}
{{- if has .name $names -}}
{{- fail (printf "nodePools: the pool name %q appears twice" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- $pools = append $pools (dict "suffix" "" "pool" "" "config" .Values.config "nodeSelector" .Values.nodeSelector "tolerations" .Values.tolerations "resources" .Values.resources "others" $names) -}}
{{- range .Values.nodePools -}}
{{- $pools = append $pools (dict "suffix" (printf "-%s" .name) "pool" .name "config" .config "nodeSelector" (.nodeSelector | default $.Values.nodeSelector) "tolerations" (.tolerations | default $.Values.tolerations) "resources" (.resources | default $.Values.resources) "others" list) -}}
{{- end -}}
{{- toJson $pools -}}
{{- end }}

{{/* A pool's node configuration as its ConfigMap holds it (`config` rendered with `tpl`): the one
rendering of it, for the DaemonSets' ConfigMaps (configmap.yaml) and the uninstall hook's copy
(withdraw.yaml). Takes (dict "root" $ "pool" <an entry of topolet.pools>). */}}
{{- define "topolet.configText" -}}
{{ tpl .pool.config .root }}
{{- end }}

{{/* The empty directory of topolet's own in the kubelet's root directory whose statvfs is the
nodefs (hostPaths.nodefs). */}}
{{- define "topolet.nodefsProbe" -}}
{{ printf "%s/topolet-nodefs" (trimSuffix "/" .Values.hostPaths.nodefs) }}
{{- end }}

{{/* The empty directory of topolet's own in containerd's root directory whose statvfs is the
imagefs (hostPaths.imagefs). */}}
{{- define "topolet.imagefsProbe" -}}
{{ printf "%s/topolet-imagefs" (trimSuffix "/" .Values.hostPaths.imagefs) }}
{{- end }}

{{/* The overlayfs snapshotter's directory in containerd's root: the containers' writable layers
(their disk usage). Only this: containerd's metadata database, beside it, holds every
container's spec, environment included. */}}
{{- define "topolet.snapshots" -}}
{{ printf "%s/io.containerd.snapshotter.v1.overlayfs" (trimSuffix "/" .Values.hostPaths.imagefs) }}
{{- end }}

{{/* Checks of values the schema cannot express. */}}
{{- define "topolet.check" -}}
{{- if and (hasPrefix "127." .Values.metrics.bindAddress) (not .Values.hostNetwork) -}}
{{- fail (printf "metrics.bindAddress %s: a loopback address is only reachable by the readiness probe with hostNetwork: true" .Values.metrics.bindAddress) -}}
{{- end -}}
{{- if not (hasPrefix "/" .Values.nri.socket) -}}
{{- fail (printf "nri.socket %q: an absolute path on the node" .Values.nri.socket) -}}
{{- end -}}
{{- end }}
