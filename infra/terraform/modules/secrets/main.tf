# Generated credentials, held in Secrets Manager under the farm's key, one secret per use so each
# role reads only its own (modules/iam): each role's Redis password (the worker's for workers, the
# control plane's, the cli's for submitters, the admin's for operators), Flower's basic auth and
# the webhook signing key (control plane only). Hosts read them at boot with their instance role;
# they never appear in user data.

variable "name" {
  description = "Farm name."
  type        = string
}

variable "kms_key_arn" {
  description = "Key that encrypts the secrets."
  type        = string
}

variable "redis_users" {
  description = "The Redis users (modules/broker's `users`): each gets a password, each but `default` a secret of its own."
  type        = list(string)

  validation {
    condition     = contains(var.redis_users, "default")
    error_message = "ElastiCache needs a user named default in the user group: give modules/broker's users."
  }
}

locals {
  redis_roles = [for user in var.redis_users : user if user != "default"]

  # Each secret's name (under <name>/) and description.
  secrets = merge(
    { for role in local.redis_roles : "redis-${role}" => "Password of the ${role} Redis user of ${var.name}" },
    {
      flower-basic-auth   = "Flower basic-auth user and password of ${var.name}"
      webhook-signing-key = "Webhook signing key (FARM_WEBHOOK_SECRET) of ${var.name}"
    },
  )
  values = merge(
    { for role in local.redis_roles : "redis-${role}" => random_password.redis[role].result },
    {
      flower-basic-auth   = jsonencode({ user = "farm", password = random_password.flower.result })
      webhook-signing-key = random_password.webhook.result
    },
  )
}

# ElastiCache passwords are 16-128 printable characters without @, " or /; alphanumerics also keep
# one safe inside a redis:// URL without escaping. The default user's goes into no secret: it is
# off, and no one logs in as it.
resource "random_password" "redis" {
  for_each = toset(var.redis_users)

  length  = 64
  special = false
}

resource "random_password" "flower" {
  length  = 32
  special = false
}

# The reconciler signs each webhook with it (X-Farm-Signature); receivers get it from the admin.
resource "random_password" "webhook" {
  length  = 48
  special = false
}

resource "aws_secretsmanager_secret" "farm" {
  #checkov:skip=CKV2_AWS_57:Each is rotated by hand, as infra/README.md says: a Redis password by ElastiCache's two passwords per user and a restart of its role's hosts, Flower's by a control-plane restart, the webhook key after every receiver has the new one; no Lambda rotation fits these.
  for_each = local.secrets

  name                    = "${var.name}/${each.key}"
  description             = each.value
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "farm" {
  for_each = local.secrets

  secret_id     = aws_secretsmanager_secret.farm[each.key].id
  secret_string = local.values[each.key]
}

# Flower's and the webhook's secrets were one block each before the for_each: keep them.
moved {
  from = aws_secretsmanager_secret.flower
  to   = aws_secretsmanager_secret.farm["flower-basic-auth"]
}

moved {
  from = aws_secretsmanager_secret_version.flower
  to   = aws_secretsmanager_secret_version.farm["flower-basic-auth"]
}

moved {
  from = aws_secretsmanager_secret.webhook
  to   = aws_secretsmanager_secret.farm["webhook-signing-key"]
}

moved {
  from = aws_secretsmanager_secret_version.webhook
  to   = aws_secretsmanager_secret_version.farm["webhook-signing-key"]
}

output "redis_passwords" {
  description = "Each Redis user's password by user name (for modules/broker only)."
  value       = { for user in var.redis_users : user => random_password.redis[user].result }
  sensitive   = true
}

output "redis_secret_arns" {
  description = "Each role's Redis password secret by role (admin, control, worker, cli)."
  value       = { for role in local.redis_roles : role => aws_secretsmanager_secret.farm["redis-${role}"].arn }
}

output "flower_secret_arn" {
  description = "Secret holding Flower's basic-auth credentials as JSON {user, password}."
  value       = aws_secretsmanager_secret.farm["flower-basic-auth"].arn
}

output "webhook_secret_arn" {
  description = "Secret holding the webhook signing key."
  value       = aws_secretsmanager_secret.farm["webhook-signing-key"].arn
}
