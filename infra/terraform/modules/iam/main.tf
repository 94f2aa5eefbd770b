# Least-privilege roles, one per kind of caller: workers, the control plane, and the submitters
# group. Their policies are plain data in ./policies, rendered and evaluated by the tests.

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

module "policies" {
  source             = "./policies"
  bucket_arn         = var.bucket_arn
  kms_key_arn        = var.kms_key_arn
  region             = var.region
  redis_secret_arns  = var.redis_secret_arns
  flower_secret_arn  = var.flower_secret_arn
  webhook_secret_arn = var.webhook_secret_arn
  worker_asg_arn     = local.asg_arn
  ecr_repository_arn = var.ecr_repository_arn
  metric_namespace   = var.metric_namespace
  write_once_keys    = var.write_once_keys
}

resource "aws_iam_role" "worker" {
  name               = "${var.name}-worker"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
}

resource "aws_iam_role_policy" "worker" {
  name   = "farm-worker"
  role   = aws_iam_role.worker.id
  policy = module.policies.worker
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
  policy = module.policies.control
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

# People and tools that submit jobs with the CLI: add their IAM users to this group.
resource "aws_iam_group" "submitters" {
  name = "${var.name}-submitters"
}

resource "aws_iam_policy" "submitter" {
  name        = "${var.name}-submitter"
  description = "farm submit, status, fetch, logs and retry: upload scenes and assets, write a job's record, read jobs."
  policy      = module.policies.submitter
}

resource "aws_iam_group_policy_attachment" "submitters" {
  group      = aws_iam_group.submitters.name
  policy_arn = aws_iam_policy.submitter.arn
}
