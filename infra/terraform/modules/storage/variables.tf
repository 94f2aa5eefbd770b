variable "bucket_name" {
  description = "Name of the farm's bucket."
  type        = string
}

variable "kms_key_arn" {
  description = "Customer-managed key for SSE-KMS."
  type        = string
}

variable "intermediate_expiry_days" {
  description = "Days before objects tagged farm-data=intermediate expire."
  type        = number
}

variable "noncurrent_version_expiry_days" {
  description = "Days a noncurrent object version is kept."
  type        = number
}

variable "access_log_bucket" {
  description = "Existing bucket for S3 server access logs; empty: no access logs."
  type        = string
}
