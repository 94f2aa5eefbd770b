output "bucket_name" {
  description = "The farm's bucket: FARM_S3_BUCKET for `farm submit` from a workstation."
  value       = module.storage.bucket_name
}

output "redis_endpoint" {
  description = "Redis primary endpoint (TLS on 6379; one user per role, each password in its secret below)."
  value       = module.broker.primary_endpoint
}

output "redis_secret_arns" {
  description = "Secrets Manager secret with each role's Redis password, by role (the user is named as the role): cli for `farm submit`, admin for operators."
  value       = module.secrets.redis_secret_arns
}

output "flower_tunnel" {
  description = "Flower listens on the control plane's loopback only (its /metrics and /healthcheck need no login): run this, then open http://127.0.0.1:5555 (credentials in the flower secret). The tunnel is Session Manager's, encrypted and IAM-authorized."
  value       = "aws ssm start-session --region ${var.region} --target ${module.control_plane.instance_id} --document-name AWS-StartPortForwardingSession --parameters portNumber=5555,localPortNumber=5555"
}

output "flower_secret_arn" {
  description = "Secrets Manager secret with Flower's basic-auth user and password."
  value       = module.secrets.flower_secret_arn
}

output "control_plane_instance_id" {
  description = "Control-plane instance, for `aws ssm start-session` port forwarding to Flower."
  value       = module.control_plane.instance_id
}

output "worker_autoscaling_groups" {
  description = "Auto Scaling group of each worker pool."
  value       = { for k, m in module.workers : k => m.autoscaling_group_name }
}

output "kms_key_arn" {
  description = "The farm's KMS key."
  value       = module.kms.key_arn
}

output "submitters_group_name" {
  description = "IAM group for the people who run `farm submit`: it may upload scenes and assets, write a job's record and read jobs, nothing else."
  value       = module.iam.submitters_group_name
}

output "submitter_policy_arn" {
  description = "The submitters' policy, to attach to a role of your own (CI, an SSO permission set)."
  value       = module.iam.submitter_policy_arn
}
