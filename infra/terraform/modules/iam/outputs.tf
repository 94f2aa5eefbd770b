output "worker_instance_profile_arn" {
  description = "Instance profile of the GPU workers."
  value       = aws_iam_instance_profile.worker.arn
}

output "control_plane_instance_profile_name" {
  description = "Instance profile of the control plane."
  value       = aws_iam_instance_profile.control_plane.name
}
