variable "name" {
  description = "Farm name; worker groups are named <name>-<pool>."
  type        = string
}

variable "region" {
  description = "Region of the farm."
  type        = string
}

variable "account_id" {
  description = "Account of the farm."
  type        = string
}

variable "bucket_arn" {
  description = "ARN of the farm's bucket."
  type        = string
}

variable "kms_key_arn" {
  description = "The farm's one KMS key."
  type        = string
}

variable "redis_secret_arns" {
  description = "Each role's Redis password secret by role (see ./policies)."
  type        = map(string)
}

variable "flower_secret_arn" {
  description = "Secret holding Flower's credentials (control plane only)."
  type        = string
}

variable "ecr_repository_arn" {
  description = "ECR repository of the worker image; empty for a public image."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace the control plane may publish to."
  type        = string
}

variable "webhook_secret_arn" {
  description = "Secret holding the webhook signing key (control plane only)."
  type        = string
}

variable "write_once_keys" {
  description = "Key patterns created only with If-None-Match: * (see ./policies)."
  type        = list(string)
  default     = []
}
