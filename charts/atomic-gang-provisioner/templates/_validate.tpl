{{/*
Every check that must fail the render, in one place; the Deployment includes it, so no
install gets past a missing or contradictory value. Each message names the value and says
what to set.
*/}}
{{- define "agp.validate" -}}
{{- $v := .Values }}
{{- $_ := required "clusterName is required: the EKS cluster the gang nodes join (--set-string clusterName=<name>)" $v.clusterName }}
{{- $_ := required "defaults.region is required: the EKS cluster's region, the only region gangs launch in (--set-string defaults.region=<region>)" $v.defaults.region }}
{{- $_ := required "image.repository is required: the registry repository your cluster pulls the controller image from; no public image is published. Build it with `make image`, push it, then --set-string image.repository=<registry>/atomic-gang-provisioner" $v.image.repository }}
{{- if ne $v.integrationMode "admissioncheck" }}
{{- fail (printf "integrationMode %q is not supported: use admissioncheck. Watching Jobs directly cannot stop their pods from being created before the nodes exist, so admission is gated through a Kueue AdmissionCheck." $v.integrationMode) }}
{{- end }}
{{- if not (has $v.defaults.mode (list "runinstances" "fleet")) }}
{{- fail (printf "defaults.mode %q is not an acquisition mode: use runinstances or fleet." $v.defaults.mode) }}
{{- end }}
{{- if and (not $v.defaults.nodeRoleArn) (not $v.allowedNodeRoleArns) }}
{{- fail "defaults.nodeRoleArn is required unless allowedNodeRoleArns lists the node roles Jobs may name: with neither, every gang would be refused." }}
{{- end }}
{{- if and $v.defaults.nodeRoleArn $v.allowedNodeRoleArns (not (has $v.defaults.nodeRoleArn $v.allowedNodeRoleArns)) }}
{{- fail (printf "defaults.nodeRoleArn %s is not in allowedNodeRoleArns: Jobs relying on the default would be refused. Add it to the list." $v.defaults.nodeRoleArn) }}
{{- end }}
{{- /* amiPolicy and limits.maxLifetime: what a Job may choose (the controller checks the same at start). */}}
{{- $amiPolicy := $v.amiPolicy | default dict }}
{{- range $owner := $amiPolicy.allowedOwners | default list }}
{{- if not (or (regexMatch "^[0-9]{12}$" (toString $owner)) (has (toString $owner) (list "self" "amazon" "aws-marketplace" "aws-backup-vault"))) }}
{{- fail (printf "amiPolicy.allowedOwners entry %q is neither a 12-digit account id nor one of self, amazon, aws-marketplace, aws-backup-vault." (toString $owner)) }}
{{- end }}
{{- end }}
{{- range $image := $amiPolicy.allowedImageIds | default list }}
{{- if not (regexMatch "^ami-([0-9a-f]{8}|[0-9a-f]{17})$" (toString $image)) }}
{{- fail (printf "amiPolicy.allowedImageIds entry %q is not an AMI id such as ami-0123456789abcdef0." (toString $image)) }}
{{- end }}
{{- end }}
{{- range $type := $v.allowedInstanceTypes | default list }}
{{- if not (regexMatch "^[a-z0-9.-]+\\*?$|^\\*$" (toString $type)) }}
{{- fail (printf "allowedInstanceTypes entry %q is not an instance type or a trailing-* glob such as p5.48xlarge or p5.*." (toString $type)) }}
{{- end }}
{{- end }}
{{- if and (gt (int $v.replicaCount) 1) (not $v.leaderElection.enabled) }}
{{- fail (printf "leaderElection.enabled=false with replicaCount=%d would run %d active controllers: enable leader election or set replicaCount=1." (int $v.replicaCount) (int $v.replicaCount)) }}
{{- end }}
{{- if $v.pulumi.ephemeralState }}
{{- if gt (int $v.replicaCount) 1 }}
{{- fail (printf "pulumi.ephemeralState=true with replicaCount=%d: each replica would keep its own stacks in its own pod, so a failover would lose every pool's record. Set pulumi.backendUrl to a shared s3:// backend, or replicaCount=1." (int $v.replicaCount)) }}
{{- end }}
{{- if $v.pulumi.backendUrl }}
{{- fail (printf "pulumi.ephemeralState=true and pulumi.backendUrl=%s contradict each other: unset one." $v.pulumi.backendUrl) }}
{{- end }}
{{- else }}
{{- if not $v.pulumi.backendUrl }}
{{- fail "pulumi.backendUrl is required: the durable backend every pool's Pulumi stack lives in, shared by all replicas, e.g. s3://<bucket>?region=<region> (the bootstrap's stackBackendUrl output). For a throwaway install that may lose its stacks with the pod, set pulumi.ephemeralState=true instead." }}
{{- end }}
{{- if and (include "agp.usesPassphrase" .) (not $v.pulumi.passphraseSecret.name) }}
{{- fail "pulumi.passphraseSecret.name is required with pulumi.secretsProvider=passphrase: name a Secret you keep holding the stacks' passphrase, or set pulumi.secretsProvider=awskms://alias/<alias>?region=<region> (the bootstrap's stackSecretsProvider output)." }}
{{- end }}
{{- end }}
{{- $workers := ($v.stackOperations | default dict).workers }}
{{- if and (not (kindIs "invalid" $workers)) (lt (int $workers) 1) }}
{{- fail (printf "stackOperations.workers=%v must be at least 1: with no worker no pool's stack is ever prepared, recorded or destroyed. Leave it empty for two per CPU within the memory limit." $workers) }}
{{- end }}
{{- $providerHost := ($v.stackOperations | default dict).providerHost | default "shared" }}
{{- if not (has $providerHost (list "shared" "perOperation")) }}
{{- fail (printf "stackOperations.providerHost=%q is not offered: use shared (one provider host for every stack operation) or perOperation (the Pulumi CLI starts one per operation)." $providerHost) }}
{{- end }}
{{- if $v.nodeBootstrap.enabled }}
{{- fail "nodeBootstrap.enabled=true is not offered by this chart: create the node role's instance profile and EKS access entry with the bootstrap program (`pulumi up` at the repository root), or let the controller create them with iam.selfManageInstanceProfile=true and iam.manageAccessEntry=true." }}
{{- end }}
{{- if not (has $v.auth.mode (list "podIdentity" "irsa" "static" "node")) }}
{{- fail (printf "auth.mode %q is not supported: use podIdentity, irsa, static or node." $v.auth.mode) }}
{{- end }}
{{- if and (eq $v.auth.mode "irsa") $v.serviceAccount.create }}
{{- $_ := required "serviceAccount.roleArn is required with auth.mode=irsa: the IAM role the ServiceAccount assumes (eks.amazonaws.com/role-arn)" $v.serviceAccount.roleArn }}
{{- end }}
{{- if eq $v.auth.mode "static" }}
{{- $_ := required "auth.static.secretName is required with auth.mode=static: a Secret holding AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" $v.auth.static.secretName }}
{{- end }}
{{- if $v.webhook.enabled }}
{{- if not (has $v.webhook.certMode (list "certManager" "selfSigned" "provided")) }}
{{- fail (printf "webhook.certMode %q is not supported: use certManager, selfSigned or provided." $v.webhook.certMode) }}
{{- end }}
{{- if not (has $v.webhook.failurePolicy (list "Fail" "Ignore")) }}
{{- fail (printf "webhook.failurePolicy %q is not a failure policy: use Fail (refuse gang Jobs while the webhook is down) or Ignore." $v.webhook.failurePolicy) }}
{{- end }}
{{- if and $v.webhook.pods.enabled (not (has $v.webhook.pods.failurePolicy (list "Fail" "Ignore"))) }}
{{- fail (printf "webhook.pods.failurePolicy %q is not a failure policy: use Fail (refuse pods that could reach gang nodes while the webhook is down) or Ignore." $v.webhook.pods.failurePolicy) }}
{{- end }}
{{- if eq $v.webhook.certMode "provided" }}
{{- $_ := required "webhook.tls.secretName is required with webhook.certMode=provided: a kubernetes.io/tls Secret in the release namespace" $v.webhook.tls.secretName }}
{{- $_ := required "webhook.caBundle is required with webhook.certMode=provided: the base64 PEM of the CA that signed the webhook certificate" $v.webhook.caBundle }}
{{- end }}
{{- end }}
{{- if $v.kueue.create.clusterQueue }}
{{- $quota := $v.kueue.clusterQueue.nominalQuota }}
{{- range $resource := list "cpu" "memory" }}
{{- $value := required (printf "kueue.clusterQueue.nominalQuota.%s is required: Kueue admits nothing without a non-zero quota (--set-string kueue.clusterQueue.nominalQuota.%s=<quantity>)" $resource $resource) (get $quota $resource) }}
{{- if include "agp.isZero" $value }}
{{- fail (printf "kueue.clusterQueue.nominalQuota.%s is %v: it must be non-zero, or Kueue admits nothing." $resource $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* env, extraVolumes, extraVolumeMounts: added to the chart's own, never replacing them. */}}
{{- $chartEnv := list "POD_NAME" "POD_NAMESPACE" "AWS_REGION" "AWS_DEFAULT_REGION" "HOME" "PULUMI_HOME" "PULUMI_SKIP_UPDATE_CHECK" "PULUMI_CONFIG_PASSPHRASE" }}
{{- range $i, $entry := $v.env | default list }}
{{- if has $entry.name $chartEnv }}
{{- fail (printf "env[%d].name %s is set by the chart itself (%s): the controller's region comes from defaults.region, and the Pulumi variables from pulumi.*. Remove it from env." $i $entry.name (join ", " $chartEnv)) }}
{{- end }}
{{- end }}
{{- $chartVolumes := list "settings" "webhook-tls" "ownership-key" "work" "tmp" }}
{{- range $i, $volume := $v.extraVolumes | default list }}
{{- if has $volume.name $chartVolumes }}
{{- fail (printf "extraVolumes[%d].name %s is one of the chart's own volumes (%s): give it another name." $i $volume.name (join ", " $chartVolumes)) }}
{{- end }}
{{- end }}
{{- range $i, $mount := $v.extraVolumeMounts | default list }}
{{- $path := trimSuffix "/" (toString $mount.mountPath) }}
{{- range $own := list "/etc/atomic-gang" "/var/lib/atomic-gang" "/tmp" "/run/secrets/atomic-gang/webhook" "/run/secrets/atomic-gang/ownership" }}
{{- if or (eq $path $own) (hasPrefix (printf "%s/" $own) $path) }}
{{- fail (printf "extraVolumeMounts[%d].mountPath %s is at or under %s, where the chart mounts its own volume: mount it elsewhere." $i $mount.mountPath $own) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Rules between values that the controller checks at start and a JSON schema cannot
compare: the schema has already checked each duration's form. */}}
{{- $seconds := dict }}
{{- range $name, $text := dict "keepWarm" $v.defaults.keepWarmTTL "maxKeepWarm" $v.limits.maxKeepWarmTTL "lifetime" $v.defaults.maxLifetime "maxLifetime" ($v.limits.maxLifetime | default "168h") "initial" $v.retryBackoff.initial "max" $v.retryBackoff.max "ca" $v.webhook.selfSigned.caValidity "cert" $v.webhook.selfSigned.certValidity "check" $v.webhook.selfSigned.checkInterval }}
{{- $_ := set $seconds $name (include "agp.durationSeconds" $text | float64) }}
{{- end }}
{{- if gt $seconds.keepWarm $seconds.maxKeepWarm }}
{{- fail (printf "defaults.keepWarmTTL %s is longer than limits.maxKeepWarmTTL %s: Jobs relying on the default would be refused. Shorten the default or raise the limit." $v.defaults.keepWarmTTL $v.limits.maxKeepWarmTTL) }}
{{- end }}
{{- if gt $seconds.lifetime $seconds.maxLifetime }}
{{- fail (printf "defaults.maxLifetime %s is longer than limits.maxLifetime %s: Jobs relying on the default would be refused. Shorten the default or raise the limit." $v.defaults.maxLifetime ($v.limits.maxLifetime | default "168h")) }}
{{- end }}
{{- if gt $seconds.initial $seconds.max }}
{{- fail (printf "retryBackoff.initial %s is longer than retryBackoff.max %s: the wait starts at initial and doubles up to max, e.g. {initial: 5s, max: 5m}." $v.retryBackoff.initial $v.retryBackoff.max) }}
{{- end }}
{{- $ports := list (int $v.metrics.port) (int $v.health.port) (int $v.webhook.port) }}
{{- if ne (len (uniq $ports)) 3 }}
{{- fail (printf "metrics.port, health.port and webhook.port must differ, got %v: each is its own listener in the controller." $ports) }}
{{- end }}
{{- if and $v.webhook.enabled (eq $v.webhook.certMode "selfSigned") }}
{{- if ge $seconds.cert $seconds.ca }}
{{- fail (printf "webhook.selfSigned.certValidity %s must be shorter than caValidity %s: a serving certificate cannot outlive the CA that signs it." $v.webhook.selfSigned.certValidity $v.webhook.selfSigned.caValidity) }}
{{- end }}
{{- /* The controller renews at 2/3 of a life and checks ten times in the last third. */}}
{{- if gt (mulf $seconds.check 30.0) $seconds.cert }}
{{- fail (printf "webhook.selfSigned.checkInterval %s is too long for certValidity %s: the certificate could expire between two checks. Keep checkInterval under a thirtieth of certValidity." $v.webhook.selfSigned.checkInterval $v.webhook.selfSigned.certValidity) }}
{{- end }}
{{- end }}
{{- if and $v.kueue.create.localQueues (not $v.kueue.localQueueNamespaces) }}
{{- fail "kueue.localQueueNamespaces is empty with kueue.create.localQueues=true: list the namespaces whose Jobs use the gang queue, or set kueue.create.localQueues=false." }}
{{- end }}
{{- end }}

{{/* A Go duration (already of the schema's form) in seconds, as a float: "1h30m" is 5400. */}}
{{- define "agp.durationSeconds" -}}
{{- $text := toString . }}
{{- $unitSeconds := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "μs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range $term := regexFindAll "([0-9]+[.]?[0-9]*|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h)" $text -1 }}
{{- $unit := regexFind "(ns|us|µs|μs|ms|s|m|h)$" $term }}
{{- $total = addf $total (mulf (float64 (trimSuffix $unit $term)) (get $unitSeconds $unit)) }}
{{- end }}
{{- if hasPrefix "-" $text }}{{ mulf $total -1.0 }}{{ else }}{{ $total }}{{ end }}
{{- end }}
