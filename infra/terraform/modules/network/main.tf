# Security groups: Redis admits only workers and the control plane; nothing else admits anything
# (Flower listens on the control plane's loopback, reached through Session Manager port
# forwarding); workers and the control plane reach out on HTTPS and to Redis, nothing else.

variable "name" {
  description = "Farm name."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the farm."
  type        = string
}

locals {
  redis_port = 6379
}

resource "aws_security_group" "workers" {
  #checkov:skip=CKV2_AWS_5:Attached through this module's outputs (the workers' launch templates); checkov's graph does not follow module outputs.
  name        = "${var.name}-workers"
  description = "GPU workers of ${var.name}: no inbound; HTTPS and Redis outbound"
  vpc_id      = var.vpc_id
}

resource "aws_security_group" "control_plane" {
  #checkov:skip=CKV2_AWS_5:Attached through this module's outputs (the control-plane instance); checkov's graph does not follow module outputs.
  name        = "${var.name}-control-plane"
  description = "Reconciler and Flower of ${var.name}: no inbound (Flower via Session Manager)"
  vpc_id      = var.vpc_id
}

resource "aws_security_group" "redis" {
  #checkov:skip=CKV2_AWS_5:Attached through this module's outputs (the ElastiCache replication group); checkov's graph does not follow module outputs.
  name        = "${var.name}-redis"
  description = "ElastiCache Redis of ${var.name}: from workers and control plane only"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "redis_from_workers" {
  security_group_id            = aws_security_group.redis.id
  description                  = "Redis from GPU workers"
  referenced_security_group_id = aws_security_group.workers.id
  ip_protocol                  = "tcp"
  from_port                    = local.redis_port
  to_port                      = local.redis_port
}

resource "aws_vpc_security_group_ingress_rule" "redis_from_control_plane" {
  security_group_id            = aws_security_group.redis.id
  description                  = "Redis from the control plane"
  referenced_security_group_id = aws_security_group.control_plane.id
  ip_protocol                  = "tcp"
  from_port                    = local.redis_port
  to_port                      = local.redis_port
}

# HTTPS out: S3, Secrets Manager, CloudWatch, Auto Scaling and the image registry. Use VPC
# endpoints and a prefix list instead if the subnets have no NAT.
resource "aws_vpc_security_group_egress_rule" "https" {
  for_each          = { workers = aws_security_group.workers.id, control_plane = aws_security_group.control_plane.id }
  security_group_id = each.value
  description       = "HTTPS to AWS APIs and the image registry"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "redis" {
  for_each                     = { workers = aws_security_group.workers.id, control_plane = aws_security_group.control_plane.id }
  security_group_id            = each.value
  description                  = "Redis (TLS) to the farm's ElastiCache"
  referenced_security_group_id = aws_security_group.redis.id
  ip_protocol                  = "tcp"
  from_port                    = local.redis_port
  to_port                      = local.redis_port
}

output "worker_security_group_id" {
  description = "Security group of the GPU workers."
  value       = aws_security_group.workers.id
}

output "control_plane_security_group_id" {
  description = "Security group of the control plane."
  value       = aws_security_group.control_plane.id
}

output "redis_security_group_id" {
  description = "Security group of Redis."
  value       = aws_security_group.redis.id
}
