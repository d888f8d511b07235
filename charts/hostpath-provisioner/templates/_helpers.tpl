{{/*
Names, as local-path-provisioner's chart (and `helm create`) make them: the release name when it
contains the chart name, else <release>-<chart>; 63 characters at most.
*/}}
{{- define "hostpath-provisioner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hostpath-provisioner.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hostpath-provisioner.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* The Deployment is <fullname>, the DaemonSet <fullname>-node (manifests/daemonset.yaml). */}}
{{- define "hostpath-provisioner.workloadName" -}}
{{- if eq .Values.mode "DaemonSet" -}}
{{- printf "%s-node" (include "hostpath-provisioner.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- include "hostpath-provisioner.fullname" . -}}
{{- end -}}
{{- end -}}

{{/*
The pods' label, selector and PodDisruptionBudget selector: app.kubernetes.io/name = the
workload's name, as in manifests/ (so two releases in one namespace never select each other's
pods). No Helm labels are added, so that the default rendering equals manifests/install.yaml;
commonLabels adds any.
*/}}
{{- define "hostpath-provisioner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hostpath-provisioner.workloadName" . }}
{{- end -}}

{{/* metadata.labels of every object (with the indentation of a metadata key), if any. */}}
{{- define "hostpath-provisioner.metaLabels" -}}
{{- with .Values.commonLabels }}
  labels:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{- define "hostpath-provisioner.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hostpath-provisioner.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "hostpath-provisioner.leaseNamespace" -}}
{{- default (include "hostpath-provisioner.namespace" .) .Values.leaderElection.namespace -}}
{{- end -}}

{{- define "hostpath-provisioner.configMapName" -}}
{{- default (printf "%s-config" (include "hostpath-provisioner.fullname" .)) .Values.configmap.name -}}
{{- end -}}

{{/*
config.json, built exactly as local-path-provisioner's chart builds it (templates/configmap.yaml
of v0.0.37): nodePathMap and sharedFileSystemPath when not empty, and storageClassConfigs with
each class's nodePathMap and sharedFileSystemPath only. Empty when none of them is given: the
provisioner then runs with --pv-dir and no ConfigMap is made.
*/}}
{{- define "hostpath-provisioner.configJson" -}}
{{- if or .Values.nodePathMap .Values.sharedFileSystemPath .Values.storageClassConfigs -}}
{{- $config := dict }}
{{- with .Values.nodePathMap }}
{{- $config = set $config "nodePathMap" . }}
{{- end }}
{{- with .Values.sharedFileSystemPath }}
{{- $config = set $config "sharedFileSystemPath" . }}
{{- end }}
{{- with .Values.storageClassConfigs }}
{{- $configs := dict }}
{{- range $key, $value := . }}
{{- $configValue := dict }}
{{- with $value.nodePathMap }}
{{- $configValue = set $configValue "nodePathMap" . }}
{{- end }}
{{- with $value.sharedFileSystemPath }}
{{- $configValue = set $configValue "sharedFileSystemPath" . }}
{{- end }}
{{- $configs = set $configs $key $configValue }}
{{- end }}
{{- $config = set $config "storageClassConfigs" $configs }}
{{- end }}
{{- $config | toPrettyJson }}
{{- end -}}
{{- end -}}

{{/*
Every path config.json names (nodePathMap paths of every node, sharedFileSystemPath, the same in
each storageClassConfigs entry), sorted, one per line: each is mounted from the node.
*/}}
{{- define "hostpath-provisioner.configPaths" -}}
{{- $paths := list }}
{{- $maps := list .Values }}
{{- range $_, $v := .Values.storageClassConfigs }}
{{- $maps = append $maps $v }}
{{- end }}
{{- range $maps }}
{{- range .nodePathMap }}
{{- range .paths }}
{{- $paths = append $paths . }}
{{- end }}
{{- end }}
{{- with .sharedFileSystemPath }}
{{- $paths = append $paths . }}
{{- end }}
{{- end }}
{{- $paths | uniq | sortAlpha | join "\n" }}
{{- end -}}

{{/*
The StorageClasses to render, as a YAML map name -> class values: storageClass and
localStorageClass, or one per storageClassConfigs entry whose storageClass says create (as
local-path-provisioner's chart). An entry's class has only the parameters, annotations, mount
options and topologies it gives; what it leaves out of create, defaultClass (false), and of
reclaimPolicy, volumeBindingMode and allowVolumeExpansion (storageClass's) is defaulted.
*/}}
{{- define "hostpath-provisioner.storageClasses" -}}
{{- $classes := dict }}
{{- if .Values.storageClassConfigs }}
{{- $base := dict "create" false "defaultClass" false }}
{{- range $key := list "reclaimPolicy" "volumeBindingMode" "allowVolumeExpansion" }}
{{- $_ := set $base $key (get $.Values.storageClass $key) }}
{{- end }}
{{- range $name, $entry := .Values.storageClassConfigs }}
{{- $sc := mergeOverwrite (deepCopy $base) (deepCopy (default dict $entry.storageClass)) }}
{{- if $sc.create }}
{{- $_ := set $classes $name $sc }}
{{- end }}
{{- end }}
{{- else }}
{{- if .Values.storageClass.create }}
{{- $_ := set $classes .Values.storageClass.name .Values.storageClass }}
{{- end }}
{{- if .Values.localStorageClass.create }}
{{- $_ := set $classes .Values.localStorageClass.name .Values.localStorageClass }}
{{- end }}
{{- end }}
{{- toYaml $classes }}
{{- end -}}

{{/*
Values that make no sense together fail here, with a message that names them (types and
allowed values are values.schema.json's job; these checks stand also under
--skip-schema-validation).
*/}}
{{- define "hostpath-provisioner.validate" -}}
{{- if not (has .Values.mode (list "Deployment" "DaemonSet")) }}
{{- fail (printf "hostpath-provisioner: mode %q is not Deployment or DaemonSet" (toString .Values.mode)) }}
{{- end }}
{{- if and (eq .Values.mode "DaemonSet") (not .Values.leaderElection.enabled) }}
{{- fail "hostpath-provisioner: mode DaemonSet needs leaderElection.enabled: the instances of one node take turns on a Lease, and only the leader serves claims without a selected node" }}
{{- end }}
{{- if and (eq .Values.mode "Deployment") (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "hostpath-provisioner: replicaCount %d needs leaderElection.enabled: replicas without it would all provision the same claims" (int .Values.replicaCount)) }}
{{- end }}
{{- if and .Values.nodePathMap .Values.sharedFileSystemPath }}
{{- fail "hostpath-provisioner: nodePathMap and sharedFileSystemPath are both given: use one (as local-path-provisioner, which refuses both)" }}
{{- end }}
{{- range $name, $entry := .Values.storageClassConfigs }}
{{- if and $entry.nodePathMap $entry.sharedFileSystemPath }}
{{- fail (printf "hostpath-provisioner: storageClassConfigs.%s has both nodePathMap and sharedFileSystemPath: use one" $name) }}
{{- end }}
{{- if not (or $entry.nodePathMap $entry.sharedFileSystemPath) }}
{{- fail (printf "hostpath-provisioner: storageClassConfigs.%s has neither nodePathMap nor sharedFileSystemPath: its volumes would have nowhere to go" $name) }}
{{- end }}
{{- end }}
{{- if not .Values.storageClassConfigs }}
{{- if and .Values.storageClass.create .Values.localStorageClass.create (eq .Values.storageClass.name .Values.localStorageClass.name) }}
{{- fail (printf "hostpath-provisioner: storageClass.name and localStorageClass.name are both %q: give them different names, or set one's create to false" .Values.storageClass.name) }}
{{- end }}
{{- end }}
{{- $defaults := list }}
{{- range $name, $sc := (include "hostpath-provisioner.storageClasses" . | fromYaml) }}
{{- if eq (toString $sc.defaultClass) "true" }}
{{- $defaults = append $defaults $name }}
{{- end }}
{{- end }}
{{- if gt (len $defaults) 1 }}
{{- fail (printf "hostpath-provisioner: StorageClasses %s all have defaultClass true: a cluster takes one default class" (join ", " $defaults)) }}
{{- end }}
{{- if and .Values.metrics.enabled (not .Values.metrics.port) }}
{{- fail "hostpath-provisioner: metrics.enabled needs metrics.port" }}
{{- end }}
{{- end -}}
