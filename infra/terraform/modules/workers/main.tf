# One GPU worker pool: launch template, spot Auto Scaling group and its scaling from queue depth.

locals {
  hook_name = "${var.name}-drain"
  user_data = templatefile("${path.module}/user-data.sh.tftpl", {
    region           = var.region
    image            = var.image
    ecr_registry     = var.ecr_registry
    queues           = join(",", var.queues)
    redis_host       = var.redis_host
    redis_user       = var.redis_user
    redis_secret_arn = var.redis_secret_arn
    bucket_name      = var.bucket_name
    asg_name         = var.name
    hook_name        = local.hook_name
  })
}

resource "aws_launch_template" "worker" {
  name_prefix            = "${var.name}-"
  image_id               = var.ami_id
  update_default_version = true
  user_data              = base64encode(local.user_data)
  ebs_optimized          = true

  iam_instance_profile {
    arn = var.instance_profile_arn
  }

  metadata_options {
    #checkov:skip=CKV_AWS_341:The worker runs in a container on Docker's bridge network, one hop further from IMDS than the host; with a hop limit of 1 the IMDSv2 token response never reaches it and the spot-interruption watcher is blind. IMDSv2 stays required.
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
    instance_metadata_tags      = "disabled"
  }

  network_interfaces {
    associate_public_ip_address = false
    security_groups             = [var.security_group_id]
    delete_on_termination       = true
  }

  block_device_mappings {
    device_name = "/dev/sda1"
    ebs {
      volume_size           = var.root_volume_gb
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = { Name = var.name, "farm:queues" = join(",", var.queues) }
  }
}

resource "aws_autoscaling_group" "pool" {
  name                  = var.name
  min_size              = var.min_size
  max_size              = var.max_size
  vpc_zone_identifier   = var.subnet_ids
  capacity_rebalance    = true
  health_check_type     = "EC2"
  protect_from_scale_in = false
  # GroupDesiredCapacity feeds the wake-from-zero alarm in scaling.tf.
  enabled_metrics     = ["GroupDesiredCapacity", "GroupInServiceInstances"]
  metrics_granularity = "1Minute"
  # desired_capacity is left to the scaling policies.

  mixed_instances_policy {
    instances_distribution {
      on_demand_base_capacity                  = var.on_demand_base_capacity
      on_demand_percentage_above_base_capacity = var.on_demand_percentage_above_base
      spot_allocation_strategy                 = "price-capacity-optimized"
    }

    launch_template {
      launch_template_specification {
        launch_template_id = aws_launch_template.worker.id
        version            = "$Latest"
      }

      dynamic "override" {
        for_each = var.instance_types
        content {
          instance_type = override.value
        }
      }
    }
  }

  # Scale-in and rebalancing wait here until the host's drain loop has stopped the worker
  # (which hands its chunk back) and completed the action; the timeout is the backstop.
  initial_lifecycle_hook {
    name                 = local.hook_name
    lifecycle_transition = "autoscaling:EC2_INSTANCE_TERMINATING"
    default_result       = "CONTINUE"
    heartbeat_timeout    = 300
  }

  tag {
    key                 = "Name"
    value               = var.name
    propagate_at_launch = true
  }

  lifecycle {
    ignore_changes = [desired_capacity]
  }
}
