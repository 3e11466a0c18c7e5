{{/* The settings file's content; also hashed into the pod template. */}}
{{- define "agp.settings" -}}
{{- $v := .Values -}}
clusterName: {{ $v.clusterName | quote }}
controllerName: {{ $v.controllerName | quote }}
integrationMode: {{ $v.integrationMode | quote }}
defaults:
  region: {{ $v.defaults.region | quote }}
  nodeRoleArn: {{ $v.defaults.nodeRoleArn | quote }}
  mode: {{ $v.defaults.mode | quote }}
  keepWarmTTL: {{ $v.defaults.keepWarmTTL | quote }}
  maxLifetime: {{ $v.defaults.maxLifetime | quote }}
limits:
  maxGangSize: {{ int $v.limits.maxGangSize }}
  maxKeepWarmTTL: {{ $v.limits.maxKeepWarmTTL | quote }}
  maxLifetime: {{ $v.limits.maxLifetime | default "168h" | quote }}
allowedInstanceTypes: {{ $v.allowedInstanceTypes | default list | toJson }}
{{- /* amiPolicy: an empty allowedOwners means none, so no `default` may refill it. */}}
{{- $amiPolicy := $v.amiPolicy | default dict }}
amiPolicy:
  allowedOwners: {{ $amiPolicy.allowedOwners | default list | toJson }}
  allowedImageIds: {{ $amiPolicy.allowedImageIds | default list | toJson }}
allowedNodeRoleArns: {{ $v.allowedNodeRoleArns | default list | toJson }}
tenancy:
  sharedPools: {{ ($v.tenancy | default dict).sharedPools | default list | toJson }}
{{- $bp := $v.blockPurchase | default dict }}
blockPurchase:
  enabled: {{ $bp.enabled | default false }}
{{- if not (eq (toString ($bp.maxUpfrontFeePerGang | default "")) "") }}
  maxUpfrontFeePerGang: {{ toString $bp.maxUpfrontFeePerGang | quote }}
{{- end }}
  maxDuration: {{ $bp.maxDuration | default "336h" | quote }}
  latestStart: {{ $bp.latestStart | default "24h" | quote }}
  instanceTypes: {{ $bp.instanceTypes | default list | toJson }}
  availabilityZones: {{ $bp.availabilityZones | default list | toJson }}
  purchaseSettle: {{ $bp.purchaseSettle | default "5m" | quote }}
{{- /* company rules for instances (issue #32, rules) */}}
instances:
  extraTags: {{ $v.tags | default dict | toJson }}
{{- with $v.rootVolume }}
  rootVolume: {{ toJson . }}
{{- end }}
reapIntervalSeconds: {{ int $v.reapIntervalSeconds }}
instanceIndexRefreshSeconds: {{ int $v.instanceIndexRefreshSeconds }}
joinDeadlineSeconds: {{ int $v.joinDeadlineSeconds }}
startupTaints: {{ $v.startupTaints | default list | toJson }}
capacityBlockReleaseSeconds: {{ int $v.capacityBlockReleaseSeconds }}
acquireAttemptsBeforeRetry: {{ int $v.acquireAttemptsBeforeRetry }}
unknownErrorAttemptsBeforeRetry: {{ int $v.unknownErrorAttemptsBeforeRetry }}
maxConcurrentPoolReconciles: {{ int $v.maxConcurrentPoolReconciles }}
stackOperations:
{{- with ($v.stackOperations | default dict).workers }}
  workers: {{ int . }}
{{- end }}
  idleStackTTL: {{ ($v.stackOperations | default dict).idleStackTTL | default "168h" | quote }}
  providerHost: {{ ($v.stackOperations | default dict).providerHost | default "shared" | quote }}
retryBackoff:
  initial: {{ $v.retryBackoff.initial | quote }}
  max: {{ $v.retryBackoff.max | quote }}
{{- with $v.launchBudget }}
launchBudget:
  share: {{ .share }}
  requestBucket: {{ .requestBucket }}
  requestRefillPerSecond: {{ .requestRefillPerSecond }}
  instanceBucket: {{ .instanceBucket }}
  instanceRefillPerSecond: {{ .instanceRefillPerSecond }}
{{- end }}
metricsPort: {{ int $v.metrics.port }}
healthPort: {{ int $v.health.port }}
webhookPort: {{ int $v.webhook.port }}
pulumi:
  stateDir: {{ $v.pulumi.stateDir | quote }}
  backendUrl: {{ $v.pulumi.backendUrl | quote }}
  {{- /* The controller refuses an empty backend unless told it is the ephemeral mode. */}}
  ephemeralState: {{ $v.pulumi.ephemeralState | default false }}
  secretsProvider: {{ $v.pulumi.secretsProvider | quote }}
iam:
  selfManageInstanceProfile: {{ $v.iam.selfManageInstanceProfile }}
  manageAccessEntry: {{ $v.iam.manageAccessEntry }}
ownership:
{{- if ($v.ownership | default dict).keySecret }}
  keyFile: "/run/secrets/atomic-gang/ownership/key"
{{- else }}
  {{- /* The default: the controller keeps the key in the chart's empty Secret. */}}
  selfManaged:
    namespace: {{ .Release.Namespace | quote }}
    secretName: {{ include "agp.ownershipSecretName" . | quote }}
{{- end }}
{{- with $v.aws.endpointUrl }}
aws:
  endpointUrl: {{ . | quote }}
{{- end }}
{{- /* webhook.enabled=false: the controller serves no webhook and rotates no certificate. */}}
{{- if not $v.webhook.enabled }}
webhook:
  enabled: false
{{- end }}
{{- /* webhook certificates (issue #30, certs): the controller makes and rotates its own. */}}
{{- if and $v.webhook.enabled (eq $v.webhook.certMode "selfSigned") }}
{{- $certs := $v.webhook.selfSigned }}
webhook:
  certDir: /var/lib/atomic-gang/webhook-tls
  selfManaged:
    secretName: {{ include "agp.webhookSecretName" . | quote }}
    namespace: {{ .Release.Namespace | quote }}
    webhookConfiguration: {{ include "agp.fullname" . | quote }}
    hosts: {{ include "agp.webhookHosts" . }}
    caValidity: {{ $certs.caValidity | quote }}
    certValidity: {{ $certs.certValidity | quote }}
    checkInterval: {{ $certs.checkInterval | quote }}
{{- end }}
{{- end }}
