variable "name" {
  description = "Farm name: also the Farm dimension of the published metrics."
  type        = string
}

variable "region" {
  description = "Region of the farm."
  type        = string
}

variable "subnet_id" {
  description = "Private subnet of the control-plane instance."
  type        = string
}

variable "security_group_id" {
  description = "Control-plane security group (Flower from allowed CIDRs only)."
  type        = string
}

variable "instance_profile_name" {
  description = "Control-plane instance profile."
  type        = string
}

variable "instance_type" {
  description = "Small on-demand x86_64 type."
  type        = string
}

variable "ami_ssm_parameter" {
  description = "SSM parameter of the control-plane AMI (Amazon Linux 2023: Docker from dnf, SSM agent built in)."
  type        = string
  default     = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
}

variable "image" {
  description = "The farm image (the worker image: it carries the farm CLI)."
  type        = string
}

variable "ecr_registry" {
  description = "ECR registry host to log in to; empty for a public image."
  type        = string
}

variable "redis_host" {
  description = "Redis primary endpoint."
  type        = string
}

variable "redis_user" {
  description = "The control plane's Redis user (the control role's, modules/broker)."
  type        = string
}

variable "redis_secret_arn" {
  description = "Secret holding the password of the control plane's Redis user."
  type        = string
}

variable "flower_secret_arn" {
  description = "Secret holding Flower's basic-auth credentials."
  type        = string
}

variable "bucket_name" {
  description = "The farm's bucket."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the backlog metrics."
  type        = string
}

variable "webhook_secret_arn" {
  description = "Secret holding the webhook signing key."
  type        = string
}
