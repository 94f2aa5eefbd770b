# Scaling from queue depth: the control plane publishes BacklogPerWorker (queued chunks per
# running worker) per queue, and each queue this pool serves gets a target-tracking policy.

resource "aws_autoscaling_policy" "backlog" {
  for_each                  = toset(var.queues)
  name                      = "${var.name}-${each.key}-backlog"
  autoscaling_group_name    = aws_autoscaling_group.pool.name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = 300

  target_tracking_configuration {
    target_value = var.target_backlog_per_worker

    customized_metric_specification {
      metric_name = "BacklogPerWorker"
      namespace   = var.metric_namespace
      statistic   = "Average"

      metric_dimension {
        name  = "Farm"
        value = var.farm_name
      }

      metric_dimension {
        name  = "Queue"
        value = each.key
      }
    }
  }
}

# Target tracking scales by the ratio of metric to target times current capacity, so the farm
# does not rely on it to leave zero: this alarm starts the first worker when chunks wait and no
# worker of the queue is running. Target tracking takes over from one.
resource "aws_autoscaling_policy" "wake" {
  name                   = "${var.name}-wake-from-zero"
  autoscaling_group_name = aws_autoscaling_group.pool.name
  policy_type            = "SimpleScaling"
  adjustment_type        = "ExactCapacity"
  scaling_adjustment     = 1
  cooldown               = 300
}

resource "aws_cloudwatch_metric_alarm" "wake" {
  for_each            = toset(var.queues)
  alarm_name          = "${var.name}-${each.key}-work-waiting-no-workers"
  alarm_description   = "Chunks wait on ${each.key} and no worker serves it: start one."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.wake.arn]

  metric_query {
    id          = "wake"
    expression  = "IF(queued > 0 AND workers == 0 AND capacity == 0, 1, 0)"
    label       = "work waiting, pool empty"
    return_data = true
  }

  metric_query {
    id = "queued"
    metric {
      namespace   = var.metric_namespace
      metric_name = "QueuedChunks"
      period      = 60
      stat        = "Maximum"
      dimensions  = { Farm = var.farm_name, Queue = each.key }
    }
  }

  metric_query {
    id = "workers"
    metric {
      namespace   = var.metric_namespace
      metric_name = "Workers"
      period      = 60
      stat        = "Maximum"
      dimensions  = { Farm = var.farm_name, Queue = each.key }
    }
  }

  metric_query {
    id = "capacity"
    metric {
      namespace   = "AWS/AutoScaling"
      metric_name = "GroupDesiredCapacity"
      period      = 60
      stat        = "Maximum"
      dimensions  = { AutoScalingGroupName = aws_autoscaling_group.pool.name }
    }
  }
}
