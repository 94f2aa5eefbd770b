variable "name" {
  description = "Pool name (<farm>-<pool>): names the group, template and lifecycle hook."
  type        = string
}

variable "farm_name" {
  description = "Farm name: the Farm dimension of the scaling metrics."
  type        = string
}

variable "region" {
  description = "Region of the farm."
  type        = string
}

variable "queues" {
  description = "Queues this pool's workers consume; each one gets a target-tracking policy."
  type        = list(string)
}

variable "instance_types" {
  description = "GPU instance types for the mixed-instances policy."
  type        = list(string)
}

variable "min_size" {
  description = "Fewest instances (0: the pool is empty when idle)."
  type        = number
  default     = 0
}

variable "max_size" {
  description = "Most instances."
  type        = number
}

variable "on_demand_base_capacity" {
  description = "On-demand instances before spot."
  type        = number
  default     = 0
}

variable "on_demand_percentage_above_base" {
  description = "Percent on-demand above the base."
  type        = number
  default     = 0
}

variable "subnet_ids" {
  description = "Private subnets across AZs: more AZs, more spot pools."
  type        = list(string)
}

variable "security_group_id" {
  description = "Workers' security group."
  type        = string
}

variable "instance_profile_arn" {
  description = "Workers' instance profile."
  type        = string
}

variable "ami_id" {
  description = "AMI with the NVIDIA driver, Docker, the NVIDIA container toolkit and the AWS CLI."
  type        = string
}

variable "root_volume_gb" {
  description = "Root volume size."
  type        = number
}

variable "image" {
  description = "Worker container image."
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
  description = "The workers' Redis user (the worker role's, modules/broker)."
  type        = string
}

variable "redis_secret_arn" {
  description = "Secret holding the password of the workers' Redis user, and no other role's."
  type        = string
}

variable "bucket_name" {
  description = "The farm's bucket."
  type        = string
}

variable "metric_namespace" {
  description = "Namespace of BacklogPerWorker."
  type        = string
}

variable "target_backlog_per_worker" {
  description = "Target of the target-tracking policies."
  type        = number
}
