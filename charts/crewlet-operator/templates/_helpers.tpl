{{/*
The chart's name, or nameOverride.
*/}}
{{- define "crewlet-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name: fullnameOverride, else the chart's name for a release named as the chart
(crewlet-operator), else <release>-<name> for every other release name, so that every object name
ends with the chart's name. Helm's usual helper keeps a release name that merely contains the
chart's name (crewlet-operator-prod) as it is, which would name the manager
crewlet-operator-prod-controller-manager and unhook the manager's admission policy, which matches
the end of that name. A long release name is cut from its end, never the chart's name.
*/}}
{{- define "crewlet-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- $room := int (sub 62 (len $name)) }}
{{- if or (eq .Release.Name $name) (lt $room 1) }}
{{- $name }}
{{- else }}
{{- printf "%s-%s" (.Release.Name | trunc $room | trimSuffix "-") $name }}
{{- end }}
{{- end }}
{{- end }}

{{- define "crewlet-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "crewlet-operator.labels" -}}
helm.sh/chart: {{ include "crewlet-operator.chart" . }}
{{ include "crewlet-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
What selects the manager's pods.
*/}}
{{- define "crewlet-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "crewlet-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller-manager
{{- end }}

{{/*
The manager's ServiceAccount and Deployment: crewlet-operator-controller-manager.
*/}}
{{- define "crewlet-operator.managerName" -}}
{{- printf "%s-controller-manager" (include "crewlet-operator.fullname" .) }}
{{- end }}

{{/*
The end of the manager ServiceAccount's name that the admission policy matches. It is fixed, not
derived from the release: a nameOverride or fullnameOverride that changes it leaves the manager
unchecked (the install page says so, and NOTES.txt warns).
*/}}
{{- define "crewlet-operator.managerNameSuffix" -}}
crewlet-operator-controller-manager
{{- end }}

{{/*
The manager's username as the API server sees its ServiceAccount: namespace and name, exactly.
The policies match the manager by it, never by the end of a name alone: any namespace's admin may
make a ServiceAccount named crewlet-operator-controller-manager in their own namespace.
*/}}
{{- define "crewlet-operator.managerUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "crewlet-operator.managerName" .) }}
{{- end }}

{{/*
The metrics Service: a DNS label, so at most 63 characters (a long release name is cut).
*/}}
{{- define "crewlet-operator.metricsServiceName" -}}
{{- printf "%s-controller-manager-metrics-service" (include "crewlet-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "crewlet-operator.metricsCertSecret" -}}
{{- default (printf "%s-metrics-server-cert" (include "crewlet-operator.fullname" .)) .Values.certManager.secretName }}
{{- end }}

{{/*
The ServiceMonitor's scraper: a ServiceAccount bound to the metrics-reader ClusterRole, and the
Secret that holds its token.
*/}}
{{- define "crewlet-operator.metricsScraperName" -}}
{{- printf "%s-metrics-scraper" (include "crewlet-operator.fullname" .) }}
{{- end }}

{{- define "crewlet-operator.metricsScraperSecret" -}}
{{- printf "%s-token" (include "crewlet-operator.metricsScraperName" .) }}
{{- end }}

{{- define "crewlet-operator.tenantAccessName" -}}
{{- printf "%s-tenant-access" (include "crewlet-operator.fullname" .) }}
{{- end }}

{{- define "crewlet-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
A CEL string literal of a value (JSON's string syntax is CEL's).
*/}}
{{- define "crewlet-operator.celString" -}}
{{- toJson (toString .) }}
{{- end }}

{{/*
Refusals, at render time, with a message that says why (`fail`). Included by validate.yaml.
*/}}
{{- define "crewlet-operator.validate" -}}
{{- if .Values.rbac.namespaced }}
{{- fail "rbac.namespaced is not supported: the operator is cluster-scoped: it reads the cluster-scoped EngineClasses and runs companies in every namespace, so it cannot run with a namespaced Role. Remove rbac.namespaced; to keep tenants apart, give each its own namespace and isolate the engines with the class's network policy." }}
{{- end }}
{{- if and .Values.tenantProvisioner.enabled (not .Values.tenantProvisioner.subjects) }}
{{- fail "tenantProvisioner.enabled needs tenantProvisioner.subjects: the tenant provisioner's ClusterRole is bound to them and its admission policy matches by them, so set at least one subject (kind ServiceAccount with name and namespace, User or Group with name)." }}
{{- end }}
{{- range .Values.tenantProvisioner.subjects }}
{{- if and (eq .kind "ServiceAccount") (not .namespace) }}
{{- fail (printf "tenantProvisioner.subjects: the ServiceAccount %q needs a namespace." .name) }}
{{- end }}
{{- end }}
{{- if and .Values.prometheus.enabled (not .Values.metrics.enabled) }}
{{- fail "prometheus.enabled needs metrics.enabled: the ServiceMonitor scrapes the manager's metrics Service." }}
{{- end }}
{{- $args := .Values.manager.args | default list }}
{{- $leaderElectOff := false }}
{{- range $i, $arg := $args }}
{{- if regexMatch "(?i)^--leader-elect=(false|0|no)$" (toString $arg) }}
{{- $leaderElectOff = true }}
{{- else if and (eq (toString $arg) "--leader-elect") (lt (add1 $i) (len $args)) }}
{{- if regexMatch "(?i)^(false|0|no)$" (toString (index $args (add1 $i))) }}
{{- $leaderElectOff = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $leaderElectOff (gt (int .Values.manager.replicas) 1) }}
{{- fail (printf "manager.args turns leader election off (--leader-elect=false) with manager.replicas %d: every replica would reconcile at once and fight over the same objects. Keep leader election on (the default), or run one replica." (int .Values.manager.replicas)) }}
{{- end }}
{{- if and $leaderElectOff .Values.manager.sharding.enabled }}
{{- fail "manager.sharding.enabled needs leader election, which manager.args turns off (--leader-elect=false): the replica that holds the Lease assigns the companies to the replicas. Keep leader election on (the default)." }}
{{- end }}
{{- $pdb := .Values.manager.podDisruptionBudget }}
{{- if $pdb.enabled }}
{{- $max := not (kindIs "invalid" $pdb.maxUnavailable) }}
{{- $min := not (kindIs "invalid" $pdb.minAvailable) }}
{{- if and $max $min }}
{{- fail (printf "manager.podDisruptionBudget sets both maxUnavailable (%v) and minAvailable (%v), and a PodDisruptionBudget takes only one of them. Set the other to null (for example --set manager.podDisruptionBudget.maxUnavailable=null)." $pdb.maxUnavailable $pdb.minAvailable) }}
{{- else if not (or $max $min) }}
{{- fail "manager.podDisruptionBudget.enabled needs maxUnavailable or minAvailable: set one of them, or set manager.podDisruptionBudget.enabled to false." }}
{{- end }}
{{- end }}
{{- end }}
