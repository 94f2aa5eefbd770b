# ElastiCache Redis: broker, result backend and ledger. TLS in transit, KMS at rest, AUTH token
# from Secrets Manager, Multi-AZ failover, and noeviction so a full Redis refuses work instead of
# silently dropping queued chunks.

variable "name" {
  description = "Farm name."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for the cache nodes."
  type        = list(string)
}

variable "security_group_id" {
  description = "Security group admitting workers and control plane only."
  type        = string
}

variable "kms_key_arn" {
  description = "Key for encryption at rest."
  type        = string
}

variable "auth_token" {
  description = "AUTH token, the value stored in Secrets Manager by modules/secrets."
  type        = string
  sensitive   = true
}

variable "node_type" {
  description = "Cache node type."
  type        = string
}

variable "replicas" {
  description = "Replicas beside the primary, in other AZs."
  type        = number

  validation {
    condition     = var.replicas >= 1
    error_message = "Keep at least one replica: losing the broker stalls every job until it is rebuilt."
  }
}

resource "aws_elasticache_subnet_group" "redis" {
  name       = "${var.name}-redis"
  subnet_ids = var.subnet_ids
}

resource "aws_elasticache_parameter_group" "redis" {
  name   = "${var.name}-redis7"
  family = "redis7"

  # Celery and the ledger must never lose keys to eviction.
  parameter {
    name  = "maxmemory-policy"
    value = "noeviction"
  }
}

resource "aws_elasticache_replication_group" "redis" {
  replication_group_id       = "${var.name}-redis"
  description                = "${var.name} broker and ledger"
  engine                     = "redis"
  engine_version             = "7.1"
  node_type                  = var.node_type
  port                       = 6379
  num_cache_clusters         = 1 + var.replicas
  automatic_failover_enabled = true
  multi_az_enabled           = true
  parameter_group_name       = aws_elasticache_parameter_group.redis.name
  subnet_group_name          = aws_elasticache_subnet_group.redis.name
  security_group_ids         = [var.security_group_id]

  at_rest_encryption_enabled = true
  kms_key_id                 = var.kms_key_arn
  transit_encryption_enabled = true
  auth_token                 = var.auth_token
  auth_token_update_strategy = "ROTATE"

  snapshot_retention_limit   = 3
  auto_minor_version_upgrade = true
  apply_immediately          = false
}

output "primary_endpoint" {
  description = "Primary endpoint address (TLS, port 6379)."
  value       = aws_elasticache_replication_group.redis.primary_endpoint_address
}
