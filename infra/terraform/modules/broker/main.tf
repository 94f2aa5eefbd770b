# ElastiCache Redis: broker, result backend and ledger. TLS in transit, KMS at rest, one user per
# role (RBAC) with its password from Secrets Manager, Multi-AZ failover, and noeviction so a full
# Redis refuses work instead of silently dropping queued chunks.

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

variable "passwords" {
  description = "Each user's password by user name (modules/secrets): every role's, stored in its secret, and the default user's, given to no one."
  type        = map(string)
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

locals {
  # Each user's access string by user name: farm/core/roles.py's rules for its role, written out
  # by roles.elasticache_users() (tests/infra/test_broker.py fails when it is stale). Never edit
  # it by hand. The default user, which ElastiCache requires in every group, is off.
  access_strings = jsondecode(file("${path.module}/redis-users.json"))
}

resource "aws_elasticache_user" "farm" {
  for_each = local.access_strings

  user_id       = "${var.name}-${each.key}"
  user_name     = each.key
  engine        = "REDIS"
  access_string = each.value

  authentication_mode {
    type      = "password"
    passwords = [var.passwords[each.key]]
  }
}

resource "aws_elasticache_user_group" "farm" {
  user_group_id = "${var.name}-redis-users"
  engine        = "REDIS"
  user_ids      = [for user in aws_elasticache_user.farm : user.user_id]
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
  # The users above, no AUTH token. DELETE is how a group made with one gives it up as it takes
  # the users (ElastiCache's move from AUTH to RBAC); a group made without one ignores it.
  user_group_ids             = [aws_elasticache_user_group.farm.user_group_id]
  auth_token_update_strategy = "DELETE"

  snapshot_retention_limit   = 3
  auto_minor_version_upgrade = true
  apply_immediately          = false
}

output "primary_endpoint" {
  description = "Primary endpoint address (TLS, port 6379)."
  value       = aws_elasticache_replication_group.redis.primary_endpoint_address
}

output "users" {
  description = "Every user's name, the default user's among them: modules/secrets makes their passwords."
  value       = keys(local.access_strings)
}

output "user_names" {
  description = "Each role's Redis user name by role (the default user is none: it is off)."
  value       = { for name, user in aws_elasticache_user.farm : name => user.user_name if name != "default" }
}
