output "worker_instance_profile_arn" {
  description = "Instance profile of the GPU workers."
  value       = aws_iam_instance_profile.worker.arn
}

output "control_plane_instance_profile_name" {
  description = "Instance profile of the control plane."
  value       = aws_iam_instance_profile.control_plane.name
}

output "submitters_group_name" {
  description = "IAM group of the people who submit jobs."
  value       = aws_iam_group.submitters.name
}

output "submitter_policy_arn" {
  description = "Policy of the submitters, to attach to a role of your own (CI, an SSO permission set)."
  value       = aws_iam_policy.submitter.arn
}
