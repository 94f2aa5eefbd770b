# The control plane: one small on-demand instance running the reconciler, Flower (basic auth,
# port 5555 on loopback only: Session Manager port forwarding) and the BacklogPerWorker
# publisher, all from the farm image.

data "aws_ssm_parameter" "ami" {
  name = var.ami_ssm_parameter
}

resource "aws_instance" "control_plane" {
  ami                         = data.aws_ssm_parameter.ami.insecure_value
  instance_type               = var.instance_type
  subnet_id                   = var.subnet_id
  vpc_security_group_ids      = [var.security_group_id]
  iam_instance_profile        = var.instance_profile_name
  associate_public_ip_address = false
  ebs_optimized               = true
  monitoring                  = true
  user_data_replace_on_change = true

  user_data = templatefile("${path.module}/user-data.sh.tftpl", {
    region             = var.region
    image              = var.image
    ecr_registry       = var.ecr_registry
    redis_host         = var.redis_host
    redis_user         = var.redis_user
    redis_secret_arn   = var.redis_secret_arn
    flower_secret_arn  = var.flower_secret_arn
    webhook_secret_arn = var.webhook_secret_arn
    bucket_name        = var.bucket_name
    farm_name          = var.name
    metric_namespace   = var.metric_namespace
  })

  # Containers here use host networking, so one hop is enough.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = 30
    encrypted             = true
    delete_on_termination = true
  }

  tags = {
    Name = "${var.name}-control-plane"
  }
}

output "private_ip" {
  description = "Private address of the control plane (Flower listens on its loopback only)."
  value       = aws_instance.control_plane.private_ip
}

output "instance_id" {
  description = "Instance id (for Session Manager port forwarding)."
  value       = aws_instance.control_plane.id
}
