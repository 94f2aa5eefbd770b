# Generated credentials, held in Secrets Manager under the farm's key, one secret per use so each
# role reads only its own (modules/iam): the Redis AUTH token (workers, control plane, submitters),
# Flower's basic auth and the webhook signing key (control plane only). Hosts read them at boot
# with their instance role; they never appear in user data.

variable "name" {
  description = "Farm name."
  type        = string
}

variable "kms_key_arn" {
  description = "Key that encrypts the secrets."
  type        = string
}

# ElastiCache AUTH tokens are 16-128 printable characters without @, " or /; alphanumerics also
# keep the token safe inside a redis:// URL without escaping.
resource "random_password" "redis" {
  length  = 64
  special = false
}

resource "random_password" "flower" {
  length  = 32
  special = false
}

resource "aws_secretsmanager_secret" "redis" {
  #checkov:skip=CKV2_AWS_57:Rotating a Redis AUTH token needs a coordinated ROTATE/SET on ElastiCache and a worker restart; infra/README.md documents the manual procedure.
  name                    = "${var.name}/redis-auth-token"
  description             = "AUTH token of the ${var.name} ElastiCache Redis"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "redis" {
  secret_id     = aws_secretsmanager_secret.redis.id
  secret_string = random_password.redis.result
}

resource "aws_secretsmanager_secret" "flower" {
  #checkov:skip=CKV2_AWS_57:The Flower password is rotated by changing the secret and restarting the control plane; no Lambda rotation is worth running for it.
  name                    = "${var.name}/flower-basic-auth"
  description             = "Flower basic-auth user and password of ${var.name}"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "flower" {
  secret_id     = aws_secretsmanager_secret.flower.id
  secret_string = jsonencode({ user = "farm", password = random_password.flower.result })
}

# The reconciler signs each webhook with it (X-Farm-Signature); receivers get it from the admin.
resource "random_password" "webhook" {
  length  = 48
  special = false
}

resource "aws_secretsmanager_secret" "webhook" {
  #checkov:skip=CKV2_AWS_57:Rotating the webhook key means handing the new one to every receiver first; it is rotated by hand (infra/README.md).
  name                    = "${var.name}/webhook-signing-key"
  description             = "Webhook signing key (FARM_WEBHOOK_SECRET) of ${var.name}"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "webhook" {
  secret_id     = aws_secretsmanager_secret.webhook.id
  secret_string = random_password.webhook.result
}

output "redis_auth_token" {
  description = "The Redis AUTH token (for the ElastiCache resource only)."
  value       = random_password.redis.result
  sensitive   = true
}

output "redis_auth_token_secret_arn" {
  description = "Secret holding the Redis AUTH token."
  value       = aws_secretsmanager_secret.redis.arn
}

output "flower_secret_arn" {
  description = "Secret holding Flower's basic-auth credentials as JSON {user, password}."
  value       = aws_secretsmanager_secret.flower.arn
}

output "webhook_secret_arn" {
  description = "Secret holding the webhook signing key."
  value       = aws_secretsmanager_secret.webhook.arn
}
