variable "name" {
  description = "Farm name: prefixes every resource and is the Farm dimension of the BacklogPerWorker metric (must match `farm metrics publish --farm-name`)."
  type        = string
  default     = "farm"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name))
    error_message = "name must be 2-21 lowercase letters, digits or dashes, starting with a letter."
  }
}

variable "region" {
  description = "AWS region for the whole farm."
  type        = string
}

variable "vpc_id" {
  description = "VPC to deploy into."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets (at least two, in different AZs) with egress to S3, Secrets Manager and the image registry (NAT or VPC endpoints). Workers, Redis and the control plane live here; nothing gets a public IP."
  type        = list(string)

  validation {
    condition     = length(var.private_subnet_ids) >= 2
    error_message = "Give at least two private subnets in different availability zones."
  }
}

variable "worker_image" {
  description = "Worker container image built from workers/Dockerfile, pinned by tag or digest (e.g. 123456789012.dkr.ecr.eu-west-1.amazonaws.com/farm-worker:0.1.0)."
  type        = string
}

variable "ecr_repository_arn" {
  description = "ARN of the ECR repository holding worker_image, to grant pull rights; empty when the image is public."
  type        = string
  default     = ""
}

variable "bucket_name" {
  description = "S3 bucket name; empty picks <name>-<account id>-<region>."
  type        = string
  default     = ""
}

variable "access_log_bucket" {
  description = "Existing bucket that receives S3 server access logs for the farm's bucket; empty: none."
  type        = string
  default     = ""
}

variable "intermediate_expiry_days" {
  description = "Days after which intermediate chunk data (frames, segments: objects tagged farm-data=intermediate) expires."
  type        = number
  default     = 14
}

variable "noncurrent_version_expiry_days" {
  description = "Days a replaced or deleted object version is kept."
  type        = number
  default     = 30
}

variable "redis_node_type" {
  description = "ElastiCache node type. The ledger and queues are small; micro holds thousands of jobs."
  type        = string
  default     = "cache.t4g.micro"
}

variable "redis_replicas" {
  description = "Replicas beside the primary (at least 1: Multi-AZ automatic failover)."
  type        = number
  default     = 1
}

variable "control_plane_instance_type" {
  description = "On-demand instance for the reconciler, Flower and the metric publisher (x86_64: it runs the worker image)."
  type        = string
  default     = "t3.small"
}

variable "render_encode_instance_types" {
  description = "Spot types for the render+encode pool. NVENC families only (g4dn, g5, g6, g6e); a test enforces it."
  type        = list(string)
  default     = ["g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge", "g6e.xlarge"]
}

variable "render_instance_types" {
  description = "Spot types for the render-only pool: may add GPUs without NVENC (p3: V100) since it never takes encode work."
  type        = list(string)
  default     = ["g6e.2xlarge", "g5.4xlarge", "g6.4xlarge", "p3.2xlarge"]
}

variable "render_encode_max_size" {
  description = "Most instances in the render+encode pool."
  type        = number
  default     = 10
}

variable "render_max_size" {
  description = "Most instances in the render-only pool (0 disables it)."
  type        = number
  default     = 10
}

variable "on_demand_base_capacity" {
  description = "On-demand instances each pool keeps before spot (0: all spot; they are only started when there is work)."
  type        = number
  default     = 0
}

variable "on_demand_percentage_above_base" {
  description = "Percent of capacity above the base that is on-demand (0: all spot)."
  type        = number
  default     = 0
}

variable "target_backlog_per_worker" {
  description = "Queued chunks per running worker the groups aim for; lower scales out sooner."
  type        = number
  default     = 2
}

variable "worker_ami_ssm_parameter" {
  description = "SSM parameter naming the worker AMI: an NVIDIA-driver AMI with Docker and the NVIDIA container toolkit."
  type        = string
  default     = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
}

variable "worker_root_volume_gb" {
  description = "Worker root volume: the image (~6 GB), scenes and frames of one chunk."
  type        = number
  default     = 100
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}

variable "write_once_keys" {
  description = "Key patterns in the bucket that every role may create only with If-None-Match: *, so no writer replaces what is there. Name one only once every writer of it sends the header (docs/design/security.md): the stitch writes a job's delivered output so (Store.put_file_once, the store-side join's completion)."
  type        = list(string)
  default     = ["jobs/*/output.*"]
}
