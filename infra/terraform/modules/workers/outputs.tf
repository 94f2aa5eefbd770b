output "autoscaling_group_name" {
  description = "The pool's Auto Scaling group."
  value       = aws_autoscaling_group.pool.name
}

output "launch_template_id" {
  description = "The pool's launch template."
  value       = aws_launch_template.worker.id
}
