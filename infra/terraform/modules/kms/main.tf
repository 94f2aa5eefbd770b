# The farm's one customer-managed key: the bucket, Redis at rest and the farm's secrets use it.

variable "name" {
  description = "Farm name."
  type        = string
}

variable "account_id" {
  description = "Account that owns the key; IAM policies in it decide who may use the key."
  type        = string
}

resource "aws_kms_key" "farm" {
  description             = "${var.name}: S3 objects, Redis at rest, farm secrets"
  enable_key_rotation     = true
  rotation_period_in_days = 365
  deletion_window_in_days = 30

  # Delegate to IAM in this account (the AWS default key policy): the worker and control-plane
  # roles get kms:Decrypt/GenerateDataKey on this key ARN only, in modules/iam.
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "AccountAdministersKeyThroughIam"
      Effect    = "Allow"
      Principal = { AWS = "arn:aws:iam::${var.account_id}:root" }
      Action    = "kms:*"
      Resource  = "*"
    }]
  })
}

resource "aws_kms_alias" "farm" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.farm.key_id
}

output "key_arn" {
  description = "ARN of the farm's KMS key."
  value       = aws_kms_key.farm.arn
}
