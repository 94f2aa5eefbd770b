output "bucket_name" {
  description = "The farm's bucket."
  value       = aws_s3_bucket.farm.bucket
}

output "bucket_arn" {
  description = "ARN of the farm's bucket."
  value       = aws_s3_bucket.farm.arn
}
