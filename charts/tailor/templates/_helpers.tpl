{{/*
Naming
*/}}
{{- define "tailor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tailor.fullname" -}}
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

{{- define "tailor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of a component's objects: (dict "ctx" $ "component" "admission") */}}
{{- define "tailor.componentName" -}}
{{- printf "%s-%s" (include "tailor.fullname" .ctx | trunc 50 | trimSuffix "-") .component -}}
{{- end -}}

{{/* The MutatingWebhookConfiguration's name (cluster-scoped). */}}
{{- define "tailor.webhookConfigName" -}}
{{- include "tailor.componentName" (dict "ctx" . "component" "admission") -}}
{{- end -}}

{{/*
Labels
*/}}
{{- define "tailor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tailor.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The chart's own labels, which always win. */}}
{{- define "tailor.standardLabels" -}}
{{ include "tailor.selectorLabels" . }}
helm.sh/chart: {{ include "tailor.chart" .ctx }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: tailor
{{- end -}}

{{/* Labels of every object: global.labels, then the chart's own. (dict "ctx" $ "component" "admission") */}}
{{- define "tailor.labels" -}}
{{- $labels := deepCopy (default (dict) .ctx.Values.global.labels) -}}
{{- $labels = mergeOverwrite $labels (include "tailor.standardLabels" . | fromYaml) -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* Pod template labels: global.labels < component podLabels < the chart's own. */}}
{{- define "tailor.podLabels" -}}
{{- $v := index .ctx.Values .component -}}
{{- $labels := deepCopy (default (dict) .ctx.Values.global.labels) -}}
{{- $labels = mergeOverwrite $labels (deepCopy (default (dict) $v.podLabels)) -}}
{{- $labels = mergeOverwrite $labels (include "tailor.standardLabels" . | fromYaml) -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* Deployment annotations: global.annotations < component deploymentAnnotations. Empty when none. */}}
{{- define "tailor.deploymentAnnotations" -}}
{{- $v := index .ctx.Values .component -}}
{{- $a := deepCopy (default (dict) .ctx.Values.global.annotations) -}}
{{- $a = mergeOverwrite $a (deepCopy (default (dict) $v.deploymentAnnotations)) -}}
{{- if $a }}{{ toYaml $a }}{{ end -}}
{{- end -}}

{{/* Pod annotations: global.annotations < component podAnnotations. Empty when none. */}}
{{- define "tailor.podAnnotations" -}}
{{- $v := index .ctx.Values .component -}}
{{- $a := deepCopy (default (dict) .ctx.Values.global.annotations) -}}
{{- $a = mergeOverwrite $a (deepCopy (default (dict) $v.podAnnotations)) -}}
{{- if $a }}{{ toYaml $a }}{{ end -}}
{{- end -}}

{{/*
Service accounts
*/}}
{{- define "tailor.serviceAccountName" -}}
{{- $v := index .ctx.Values .component -}}
{{- if $v.serviceAccount.create -}}
{{- default (include "tailor.componentName" .) $v.serviceAccount.name -}}
{{- else -}}
{{- default "default" $v.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Images
*/}}
{{- define "tailor.image" -}}
{{- $v := index .ctx.Values .component -}}
{{- $registry := default .ctx.Values.global.imageRegistry $v.image.registry -}}
{{- $repo := $v.image.repository -}}
{{- if $registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $registry) $repo }}{{ end -}}
{{- if $v.image.digest -}}
{{- printf "%s@%s" $repo $v.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .ctx.Chart.AppVersion $v.image.tag | toString) -}}
{{- end -}}
{{- end -}}

{{- define "tailor.imagePullSecrets" -}}
{{- $v := index .ctx.Values .component -}}
{{- $secrets := concat (default (list) .ctx.Values.global.imagePullSecrets) (default (list) $v.imagePullSecrets) -}}
{{- if $secrets }}
imagePullSecrets:
{{- range $s := $secrets }}
{{- if kindIs "string" $s }}
  - name: {{ $s }}
{{- else }}
  - name: {{ $s.name }}
{{- end }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
Scheduling: global values merged with the component's, the component winning.
*/}}
{{- define "tailor.scheduling" -}}
{{- $v := index .ctx.Values .component -}}
{{- $g := .ctx.Values.global -}}
{{- $nodeSelector := deepCopy (default (dict) $g.nodeSelector) -}}
{{- range $k, $val := (default (dict) $v.nodeSelector) }}{{ $_ := set $nodeSelector $k $val }}{{ end -}}
{{- $tolerations := concat (default (list) $g.tolerations) (default (list) $v.tolerations) -}}
{{- $affinity := deepCopy (default (dict) $g.affinity) -}}
{{- range $k, $val := (default (dict) $v.affinity) }}{{ $_ := set $affinity $k $val }}{{ end -}}
{{- $preset := default "none" $v.podAntiAffinityPreset -}}
{{- if and (not (hasKey $affinity "podAntiAffinity")) (ne $preset "none") -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "tailor.selectorLabels" . | fromYaml)) -}}
{{- if eq $preset "hard" -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- end -}}
{{- end -}}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/*
Command-line flags: (dict "args" $dict "extra" $extraArgs). A map flag -> value rendered sorted by name;
true renders a bare switch, false removes the flag, anything else renders --flag=value.
*/}}
{{- define "tailor.args" -}}
{{- $args := deepCopy .args -}}
{{- range $k, $val := (default (dict) .extra) }}{{ $_ := set $args $k $val }}{{ end -}}
{{- range $k := keys $args | sortAlpha }}
{{- $val := get $args $k }}
{{- if kindIs "bool" $val }}
{{- if $val }}
- {{ printf "--%s" $k | toJson }}
{{- end }}
{{- else if kindIs "invalid" $val }}
{{- else if and (kindIs "float64" $val) (eq $val (float64 (int64 $val))) }}
- {{ printf "--%s=%d" $k (int64 $val) | toJson }}
{{- else }}
- {{ printf "--%s=%v" $k $val | toJson }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Certificate mode of the admission webhook: certManager, existingSecret or selfManaged.
Fails when none or several are chosen.
*/}}
{{- define "tailor.admission.certMode" -}}
{{- $t := .Values.admission.tls -}}
{{- $modes := list -}}
{{- if $t.certManager.enabled }}{{ $modes = append $modes "certManager.enabled" }}{{ end -}}
{{- if $t.existingSecret.name }}{{ $modes = append $modes "existingSecret.name" }}{{ end -}}
{{- if $t.selfManaged.enabled }}{{ $modes = append $modes "selfManaged.enabled" }}{{ end -}}
{{- if gt (len $modes) 1 -}}
{{- fail (printf "admission.tls: the certificate modes are mutually exclusive but %s are set together; keep exactly one of admission.tls.certManager.enabled, admission.tls.existingSecret.name or admission.tls.selfManaged.enabled (selfManaged is on by default: set admission.tls.selfManaged.enabled=false when choosing another mode)" (join " and " $modes)) -}}
{{- else if eq (len $modes) 0 -}}
{{- fail "admission.tls: no certificate mode chosen; set one of admission.tls.certManager.enabled, admission.tls.existingSecret.name (with caBundle) or admission.tls.selfManaged.enabled" -}}
{{- end -}}
{{- index $modes 0 | trimSuffix ".enabled" | trimSuffix ".name" -}}
{{- end -}}

{{/* Name of the Secret holding the webhook's serving certificate. */}}
{{- define "tailor.admission.tlsSecretName" -}}
{{- if .Values.admission.tls.existingSecret.name -}}
{{- .Values.admission.tls.existingSecret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "tailor.componentName" (dict "ctx" . "component" "admission")) -}}
{{- end -}}
{{- end -}}

{{/* Name of the cert-manager Certificate for the serving certificate. */}}
{{- define "tailor.admission.certificateName" -}}
{{- printf "%s-tls" (include "tailor.componentName" (dict "ctx" . "component" "admission")) -}}
{{- end -}}

{{/* Whether the recommender runs leader election. */}}
{{- define "tailor.recommender.leaderElect" -}}
{{- if or .Values.recommender.leaderElection.enabled (gt (int .Values.recommender.replicas) 1) }}true{{ end -}}
{{- end -}}

{{/* Whether the updater runs leader election. */}}
{{- define "tailor.updater.leaderElect" -}}
{{- if or .Values.updater.leaderElection.enabled (gt (int .Values.updater.replicas) 1) }}true{{ end -}}
{{- end -}}

{{/* Environment shared by every component. */}}
{{- define "tailor.downwardEnv" -}}
- name: NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/* PodDisruptionBudget spec body for a component. */}}
{{- define "tailor.pdbSpec" -}}
{{- $v := index .ctx.Values .component -}}
{{- if not (kindIs "invalid" $v.pdb.maxUnavailable) }}
maxUnavailable: {{ $v.pdb.maxUnavailable }}
{{- else }}
minAvailable: {{ $v.pdb.minAvailable }}
{{- end }}
selector:
  matchLabels:
    {{- include "tailor.selectorLabels" . | nindent 4 }}
{{- end -}}

{{/*
Namespaces the pod webhook does not serve: the release namespace, kube-system and
admission.webhook.excludeNamespaces (a JSON list). The webhook configuration excludes them; the updater is
told the same (--webhook-excluded-namespaces), so that it never evicts a pod the webhook will not size.
*/}}
{{- define "tailor.webhook.excludedNamespaces" -}}
{{- concat (list .Release.Namespace "kube-system") (default (list) .Values.admission.webhook.excludeNamespaces) | uniq | toJson -}}
{{- end -}}

{{/*
The pod webhook's extra namespaceSelector terms (admission.webhook.namespaceSelector) as JSON, empty when
there are none: the updater evaluates them on namespace labels (--webhook-namespace-selector).
*/}}
{{- define "tailor.webhook.namespaceSelectorTerms" -}}
{{- $s := default (dict) .Values.admission.webhook.namespaceSelector -}}
{{- $terms := dict -}}
{{- with $s.matchLabels }}{{ $_ := set $terms "matchLabels" . }}{{ end -}}
{{- with $s.matchExpressions }}{{ $_ := set $terms "matchExpressions" . }}{{ end -}}
{{- if $terms }}{{ toJson $terms }}{{ end -}}
{{- end -}}
