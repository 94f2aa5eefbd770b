# The farm's IAM policy documents, one per role, as plain data: no provider, no resource, so the
# tests render them with Terraform itself (tests/infra/test_iam_policy.py) and evaluate every key
# the code uses against them. Roles: worker (render, segment, transcode, stitch), control
# (reconciler, Flower, metrics, farm web) and submitter (the CLI on an artist's machine).
#
# Object grants are per prefix under jobs/*/, as farm/core/keys.py lays them out. IAM cannot tell
# one job from another, so a worker may write any job's chunk data, never a job's record (spec,
# asset manifest), a scene or an asset, and deletes nothing. The control plane serves the API
# (farm web): it keeps the users' records and writes what a submit through the API brings.

variable "bucket_arn" {
  description = "ARN of the farm's bucket."
  type        = string
}

variable "kms_key_arn" {
  description = "The farm's one KMS key (objects and secrets)."
  type        = string
}

variable "region" {
  description = "Region of the farm: the key is used only through S3 and Secrets Manager there."
  type        = string
}

variable "redis_secret_arns" {
  description = "Each role's Redis password secret by role (modules/secrets): worker, control and cli, each read by that role alone (cli: the submitters)."
  type        = map(string)

  validation {
    condition     = alltrue([for role in ["worker", "control", "cli"] : contains(keys(var.redis_secret_arns), role)])
    error_message = "Give the worker, control and cli roles' Redis password secrets (modules/secrets' redis_secret_arns)."
  }
}

variable "flower_secret_arn" {
  description = "Secret holding Flower's credentials (control plane only)."
  type        = string
}

variable "webhook_secret_arn" {
  description = "Secret holding the webhook signing key (control plane only: the reconciler signs)."
  type        = string
}

variable "worker_asg_arn" {
  description = "ARN pattern of the worker Auto Scaling groups, whose termination hook a worker completes."
  type        = string
}

variable "ecr_repository_arn" {
  description = "ECR repository of the farm's image; empty for a public image."
  type        = string
  default     = ""
}

variable "metric_namespace" {
  description = "CloudWatch namespace the control plane may publish to."
  type        = string
}

variable "write_once_keys" {
  description = "Key patterns (e.g. jobs/*/manifests/*) that every role may create only with If-None-Match: *, so no writer replaces what is there. Name a pattern only once every writer of it sends the header: a write without it is refused (403)."
  type        = list(string)
  default     = []
}

locals {
  objects = "${var.bucket_arn}/"
  # What an attempt writes, per folder of its job (farm/core/keys.py), and the job's output.
  chunk_folders = ["frames", "thumbs", "masters", "file_output", "segments", "manifests", "logs"]
  chunk_data    = [for folder in local.chunk_folders : "${local.objects}jobs/*/${folder}/*"]
  outputs       = ["${local.objects}jobs/*/output.*"]
  sources       = ["${local.objects}scenes/*", "${local.objects}assets/*"]
  via_s3        = ["s3.${var.region}.amazonaws.com"]
  via_secrets   = ["secretsmanager.${var.region}.amazonaws.com"]

  # The API's own prefixes (farm/core/keys.py): users' records, and staged uploads, which the
  # bucket's lifecycle drops after a day if no submit takes them.
  users   = "${local.objects}users/*"
  uploads = "${local.objects}uploads/*"

  # A HEAD of a missing key answers 404 only to a caller that may list the bucket (403 without):
  # every role looks keys up (Store.size, Store.head), and the names say no more than the ledger.
  list_bucket = {
    Sid      = "ListBucket"
    Effect   = "Allow"
    Action   = ["s3:ListBucket"]
    Resource = [var.bucket_arn]
  }

  # CreateMultipartUpload, UploadPart and UploadPartCopy take no If-None-Match and create no
  # object (s3:ObjectCreationOperation false): the header is asked of PutObject and
  # CompleteMultipartUpload. CopyObject cannot write such a key at all (S3 has no conditional
  # copy), so no pattern here may name frames/, which the store fills by copy.
  write_once = length(var.write_once_keys) == 0 ? [] : [{
    Sid      = "CreateWriteOnceKeysOnlyIfAbsent"
    Effect   = "Deny"
    Action   = ["s3:PutObject"]
    Resource = [for pattern in var.write_once_keys : "${local.objects}${pattern}"]
    Condition = {
      Bool = { "s3:ObjectCreationOperation" = "true" }
      Null = { "s3:if-none-match" = "true" }
    }
  }]

  decrypt_secrets = {
    Sid       = "DecryptFarmSecrets"
    Effect    = "Allow"
    Action    = ["kms:Decrypt"]
    Resource  = [var.kms_key_arn]
    Condition = { StringEquals = { "kms:ViaService" = local.via_secrets } }
  }

  # Bucket keys: S3 asks KMS for the bucket's data key, so the key cannot be scoped per prefix;
  # the object grants above do that.
  objects_key = {
    Sid       = "EncryptAndDecryptObjects"
    Effect    = "Allow"
    Action    = ["kms:Decrypt", "kms:GenerateDataKey"]
    Resource  = [var.kms_key_arn]
    Condition = { StringEquals = { "kms:ViaService" = local.via_s3 } }
  }

  pull_image = var.ecr_repository_arn == "" ? [] : [
    {
      Sid      = "PullFarmImage"
      Effect   = "Allow"
      Action   = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
      Resource = [var.ecr_repository_arn]
    },
    {
      Sid      = "EcrLogin"
      Effect   = "Allow"
      Action   = ["ecr:GetAuthorizationToken"]
      Resource = ["*"] # GetAuthorizationToken has no resource-level permissions.
    },
  ]

  # Each role reads its own Redis user's password (Resource set per role), no other role's.
  read_redis_password = {
    Sid    = "ReadOwnRedisPassword"
    Effect = "Allow"
    Action = ["secretsmanager:GetSecretValue"]
  }

  worker = concat([
    {
      # A render job's scene and textures, a transcode job's master, the job's asset manifest.
      Sid    = "ReadJobSources"
      Effect = "Allow"
      Action = ["s3:GetObject"]
      Resource = [
        "${local.objects}scenes/*",
        "${local.objects}assets/*",
        "${local.objects}jobs/*/assets.json",
      ]
    },
    {
      # Segments read frames, the stitch reads manifests and segments, the store copies a master
      # to its frame's key, the stitch probes the joined output, and a file sent in parts is
      # looked up (HEAD) for its ETag: whatever a worker writes, it may read.
      Sid      = "ReadChunkData"
      Effect   = "Allow"
      Action   = ["s3:GetObject"]
      Resource = concat(local.chunk_data, local.outputs)
    },
    {
      # PutObject also covers the multipart calls (the stitch's joined output, files over 64 MiB);
      # an upload the worker began it may abort.
      Sid      = "WriteChunkData"
      Effect   = "Allow"
      Action   = ["s3:PutObject", "s3:AbortMultipartUpload"]
      Resource = concat(local.chunk_data, local.outputs)
    },
    {
      # Frames, thumbnails and segments are tagged farm-data=intermediate for the lifecycle rule.
      Sid      = "TagIntermediateData"
      Effect   = "Allow"
      Action   = ["s3:PutObjectTagging"]
      Resource = [for prefix in ["frames", "thumbs", "segments"] : "${local.objects}jobs/*/${prefix}/*"]
    },
    local.list_bucket,
    local.objects_key,
    local.decrypt_secrets,
    merge(local.read_redis_password, { Resource = [var.redis_secret_arns["worker"]] }),
    {
      # The host's drain loop finishes the termination hook once the container has stopped.
      Sid      = "CompleteOwnTerminationHook"
      Effect   = "Allow"
      Action   = ["autoscaling:CompleteLifecycleAction"]
      Resource = [var.worker_asg_arn]
    },
  ], local.pull_image, local.write_once)

  control = concat([
    {
      # farm web: thumbnails, logs and a presigned link to the output; the reconciler reads a
      # job's record back (its spec, control record, manifests, frames) to rebuild a ledger
      # that lost it, the ledger's mark, and the projects' records (farm.control.projects).
      Sid      = "ReadJobData"
      Effect   = "Allow"
      Action   = ["s3:GetObject"]
      Resource = ["${local.objects}jobs/*", "${local.objects}ledger/*", "${local.objects}projects/*"]
    },
    {
      # The reconciler keeps a failed or cancelled job's end in its control record, and the
      # ledger's mark (farm.control.rebuild); `farm project` on the control plane's host keeps
      # the projects' records.
      Sid      = "KeepLedgerRecord"
      Effect   = "Allow"
      Action   = ["s3:PutObject"]
      Resource = ["${local.objects}jobs/*/control.json", "${local.objects}ledger/*", "${local.objects}projects/*"]
    },
    {
      # The reconciler aborts the early upload of a job that failed or was cancelled.
      Sid      = "AbortEarlyUploads"
      Effect   = "Allow"
      Action   = ["s3:AbortMultipartUpload"]
      Resource = local.outputs
    },
    {
      # farm web's API: the users' records; staged uploads, read back to be hashed; a submit's
      # scene and assets, looked up (HEAD) to skip what is stored already.
      Sid      = "ReadApiData"
      Effect   = "Allow"
      Action   = ["s3:GetObject"]
      Resource = concat([local.users, local.uploads], local.sources)
    },
    {
      # Users added and revoked; staged uploads, whose presigned PUTs the API signs with this
      # role; a submit's sources, moved from their staged upload to their content-addressed key,
      # and the job's record (spec, asset manifest).
      Sid    = "WriteApiData"
      Effect = "Allow"
      Action = ["s3:PutObject"]
      Resource = concat([local.users, local.uploads], local.sources, [
        "${local.objects}jobs/*/spec.json",
        "${local.objects}jobs/*/assets.json",
      ])
    },
    {
      # A staged upload or a source large enough to go in parts, given up half-way.
      Sid      = "AbortApiUploads"
      Effect   = "Allow"
      Action   = ["s3:AbortMultipartUpload"]
      Resource = concat([local.uploads], local.sources)
    },
    {
      # A staged upload goes once it is moved to its content-addressed key, or found not to
      # match its hash; nothing else of the bucket is ever deleted by the control plane.
      Sid      = "DropStagedUploads"
      Effect   = "Allow"
      Action   = ["s3:DeleteObject"]
      Resource = [local.uploads]
    },
    local.list_bucket,
    local.objects_key, # it writes control records, the mark (KeepLedgerRecord) and the API's data
    local.decrypt_secrets,
    merge(local.read_redis_password, {
      Sid      = "ReadControlSecrets"
      Resource = [var.redis_secret_arns["control"], var.flower_secret_arn, var.webhook_secret_arn]
    }),
    {
      Sid       = "PublishFarmMetrics"
      Effect    = "Allow"
      Action    = ["cloudwatch:PutMetricData"]
      Resource  = ["*"] # PutMetricData has no resource-level permissions; the namespace is pinned.
      Condition = { StringEquals = { "cloudwatch:namespace" = var.metric_namespace } }
    },
  ], local.pull_image, local.write_once)

  submitter = concat([
    {
      # Scenes, masters and assets go up once by content hash; a HEAD (GetObject) says whether
      # the store holds them already.
      Sid      = "UploadJobSources"
      Effect   = "Allow"
      Action   = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"]
      Resource = ["${local.objects}scenes/*", "${local.objects}assets/*"]
    },
    {
      # The job's record: written at submit, the asset manifest again by `farm retry --scene`,
      # and what pause, resume, priority, cancel and retry decide (its control record).
      Sid    = "WriteJobRecord"
      Effect = "Allow"
      Action = ["s3:PutObject"]
      Resource = [
        "${local.objects}jobs/*/spec.json",
        "${local.objects}jobs/*/assets.json",
        "${local.objects}jobs/*/control.json",
      ]
    },
    {
      # farm fetch, farm logs, and retry's check of the done chunks' manifests and segments.
      Sid      = "ReadJobData"
      Effect   = "Allow"
      Action   = ["s3:GetObject"]
      Resource = ["${local.objects}jobs/*"]
    },
    local.list_bucket,
    local.objects_key,
    local.decrypt_secrets,
    # farm submit queues through Redis as the cli user.
    merge(local.read_redis_password, { Resource = [var.redis_secret_arns["cli"]] }),
  ], local.write_once)
}

output "worker" {
  description = "Policy of the GPU workers' instance role."
  value       = jsonencode({ Version = "2012-10-17", Statement = local.worker })
}

output "control" {
  description = "Policy of the control plane's instance role."
  value       = jsonencode({ Version = "2012-10-17", Statement = local.control })
}

output "submitter" {
  description = "Policy of the people and tools that submit jobs (the submitters group)."
  value       = jsonencode({ Version = "2012-10-17", Statement = local.submitter })
}
