# The farm on AWS: one bucket, one Redis, a small on-demand control plane and two GPU spot pools
# that scale from zero on the BacklogPerWorker metric the control plane publishes.

data "aws_caller_identity" "current" {}

data "aws_ssm_parameter" "worker_ami" {
  name = var.worker_ami_ssm_parameter
}

locals {
  bucket_name = var.bucket_name != "" ? var.bucket_name : "${var.name}-${data.aws_caller_identity.current.account_id}-${var.region}"
  # docker logs in to this registry when the image lives in ECR.
  ecr_registry = var.ecr_repository_arn != "" ? split("/", var.worker_image)[0] : ""

  # One pool per set of queues: encode work only ever lands on NVENC hardware.
  pools = {
    render-encode = {
      queues         = ["render", "encode", "stitch"]
      instance_types = var.render_encode_instance_types
      max_size       = var.render_encode_max_size
    }
    render = {
      queues         = ["render"]
      instance_types = var.render_instance_types
      max_size       = var.render_max_size
    }
  }
}

module "kms" {
  source     = "./modules/kms"
  name       = var.name
  account_id = data.aws_caller_identity.current.account_id
}

module "storage" {
  source                         = "./modules/storage"
  bucket_name                    = local.bucket_name
  kms_key_arn                    = module.kms.key_arn
  access_log_bucket              = var.access_log_bucket
  intermediate_expiry_days       = var.intermediate_expiry_days
  noncurrent_version_expiry_days = var.noncurrent_version_expiry_days
}

module "network" {
  source = "./modules/network"
  name   = var.name
  vpc_id = var.vpc_id
}

module "secrets" {
  source      = "./modules/secrets"
  name        = var.name
  kms_key_arn = module.kms.key_arn
  redis_users = module.broker.users
}

module "broker" {
  source            = "./modules/broker"
  name              = var.name
  subnet_ids        = var.private_subnet_ids
  security_group_id = module.network.redis_security_group_id
  kms_key_arn       = module.kms.key_arn
  passwords         = module.secrets.redis_passwords
  node_type         = var.redis_node_type
  replicas          = var.redis_replicas
}

module "iam" {
  source             = "./modules/iam"
  name               = var.name
  region             = var.region
  account_id         = data.aws_caller_identity.current.account_id
  bucket_arn         = module.storage.bucket_arn
  kms_key_arn        = module.kms.key_arn
  redis_secret_arns  = module.secrets.redis_secret_arns
  flower_secret_arn  = module.secrets.flower_secret_arn
  webhook_secret_arn = module.secrets.webhook_secret_arn
  ecr_repository_arn = var.ecr_repository_arn
  metric_namespace   = "Farm"
  write_once_keys    = var.write_once_keys
}

module "control_plane" {
  source                = "./modules/control_plane"
  name                  = var.name
  region                = var.region
  subnet_id             = var.private_subnet_ids[0]
  security_group_id     = module.network.control_plane_security_group_id
  instance_profile_name = module.iam.control_plane_instance_profile_name
  instance_type         = var.control_plane_instance_type
  image                 = var.worker_image
  redis_host            = module.broker.primary_endpoint
  redis_user            = module.broker.user_names["control"]
  redis_secret_arn      = module.secrets.redis_secret_arns["control"]
  flower_secret_arn     = module.secrets.flower_secret_arn
  webhook_secret_arn    = module.secrets.webhook_secret_arn
  bucket_name           = module.storage.bucket_name
  metric_namespace      = "Farm"
  ecr_registry          = local.ecr_registry
}

module "workers" {
  source   = "./modules/workers"
  for_each = { for k, v in local.pools : k => v if v.max_size > 0 }

  name                            = "${var.name}-${each.key}"
  farm_name                       = var.name
  region                          = var.region
  queues                          = each.value.queues
  instance_types                  = each.value.instance_types
  min_size                        = 0
  max_size                        = each.value.max_size
  on_demand_base_capacity         = var.on_demand_base_capacity
  on_demand_percentage_above_base = var.on_demand_percentage_above_base
  subnet_ids                      = var.private_subnet_ids
  security_group_id               = module.network.worker_security_group_id
  instance_profile_arn            = module.iam.worker_instance_profile_arn
  ami_id                          = data.aws_ssm_parameter.worker_ami.insecure_value
  root_volume_gb                  = var.worker_root_volume_gb
  image                           = var.worker_image
  ecr_registry                    = local.ecr_registry
  redis_host                      = module.broker.primary_endpoint
  redis_user                      = module.broker.user_names["worker"]
  redis_secret_arn                = module.secrets.redis_secret_arns["worker"]
  bucket_name                     = module.storage.bucket_name
  metric_namespace                = "Farm"
  target_backlog_per_worker       = var.target_backlog_per_worker
}
