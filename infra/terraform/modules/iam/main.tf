# Least-privilege roles. Workers read scenes and inputs, write only under jobs/, use the one KMS
# key and the Redis secret. The control plane adds Flower's secret and the Farm metric namespace.

locals {
  asg_arn = "arn:aws:autoscaling:${var.region}:${var.account_id}:autoScalingGroup:*:autoScalingGroupName/${var.name}-*"
}

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "worker" {
  statement {
    sid       = "ReadScenesAndInputs"
    actions   = ["s3:GetObject"]
    resources = ["${var.bucket_arn}/scenes/*", "${var.bucket_arn}/inputs/*"]
  }

  statement {
    sid = "ReadWriteJobData"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:PutObjectTagging",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = ["${var.bucket_arn}/jobs/*"]
  }

  statement {
    sid       = "ListFarmPrefixes"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["scenes/*", "inputs/*", "jobs/*"]
    }
  }

  statement {
    sid       = "UseFarmKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }

  statement {
    sid       = "ReadRedisToken"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.redis_secret_arn]
  }

  # The host's drain loop finishes the termination hook once the container has stopped.
  statement {
    sid       = "CompleteOwnTerminationHook"
    actions   = ["autoscaling:CompleteLifecycleAction"]
    resources = [local.asg_arn]
  }

  dynamic "statement" {
    for_each = var.ecr_repository_arn != "" ? [1] : []
    content {
      sid       = "PullWorkerImage"
      actions   = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
      resources = [var.ecr_repository_arn]
    }
  }

  dynamic "statement" {
    for_each = var.ecr_repository_arn != "" ? [1] : []
    content {
      sid       = "EcrLogin"
      actions   = ["ecr:GetAuthorizationToken"]
      resources = ["*"] # GetAuthorizationToken has no resource-level permissions.
    }
  }
}

data "aws_iam_policy_document" "control_plane" {
  source_policy_documents = [data.aws_iam_policy_document.worker.json]

  # The reconciler cancels and cleans up jobs; workers never delete.
  statement {
    sid       = "DeleteJobData"
    actions   = ["s3:DeleteObject"]
    resources = ["${var.bucket_arn}/jobs/*"]
  }

  statement {
    sid       = "ReadFlowerCredentials"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.flower_secret_arn]
  }

  statement {
    sid       = "PublishFarmMetrics"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"] # PutMetricData has no resource-level permissions; the namespace is pinned.
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metric_namespace]
    }
  }
}

resource "aws_iam_role" "worker" {
  name               = "${var.name}-worker"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
}

resource "aws_iam_role_policy" "worker" {
  name   = "farm-worker"
  role   = aws_iam_role.worker.id
  policy = data.aws_iam_policy_document.worker.json
}

resource "aws_iam_instance_profile" "worker" {
  name = "${var.name}-worker"
  role = aws_iam_role.worker.name
}

resource "aws_iam_role" "control_plane" {
  name               = "${var.name}-control-plane"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
}

resource "aws_iam_role_policy" "control_plane" {
  name   = "farm-control-plane"
  role   = aws_iam_role.control_plane.id
  policy = data.aws_iam_policy_document.control_plane.json
}

# Session Manager instead of SSH: Flower is reached by port forwarding, no inbound port 22.
resource "aws_iam_role_policy_attachment" "control_plane_ssm" {
  role       = aws_iam_role.control_plane.name
  policy_arn = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "control_plane" {
  name = "${var.name}-control-plane"
  role = aws_iam_role.control_plane.name
}
