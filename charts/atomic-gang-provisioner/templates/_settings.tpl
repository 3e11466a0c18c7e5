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
allowedInstanceTypes: {{ $v.allowedInstanceTypes | default list | toJson }}
allowedNodeRoleArns: {{ $v.allowedNodeRoleArns | default list | toJson }}
reapIntervalSeconds: {{ int $v.reapIntervalSeconds }}
instanceIndexRefreshSeconds: {{ int $v.instanceIndexRefreshSeconds }}
joinDeadlineSeconds: {{ int $v.joinDeadlineSeconds }}
capacityBlockReleaseSeconds: {{ int $v.capacityBlockReleaseSeconds }}
acquireAttemptsBeforeRetry: {{ int $v.acquireAttemptsBeforeRetry }}
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
{{- with $v.aws.endpointUrl }}
aws:
  endpointUrl: {{ . | quote }}
{{- end }}
{{- end }}
