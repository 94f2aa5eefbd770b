# The farm's bucket: private, KMS-encrypted, versioned, TLS 1.2+ only; intermediate chunk data
# (frames and segments, tagged farm-data=intermediate by the store) and abandoned API uploads
# (uploads/) expire on their own.

resource "aws_s3_bucket" "farm" {
  #checkov:skip=CKV_AWS_144:Cross-region replication would double the cost of bulky, reproducible render data; replicate deliverables downstream if needed.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events: the farm reads manifests it wrote itself, so notifications would only add cost.
  bucket = var.bucket_name
}

# Server access logs go to a bucket the account already keeps for logs, when one is named.
resource "aws_s3_bucket_logging" "farm" {
  count         = var.access_log_bucket != "" ? 1 : 0
  bucket        = aws_s3_bucket.farm.id
  target_bucket = var.access_log_bucket
  target_prefix = "s3/${var.bucket_name}/"
}

resource "aws_s3_bucket_public_access_block" "farm" {
  bucket                  = aws_s3_bucket.farm.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# ACLs disabled: the bucket owner owns every object, access is by policy only.
resource "aws_s3_bucket_ownership_controls" "farm" {
  bucket = aws_s3_bucket.farm.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "farm" {
  bucket = aws_s3_bucket.farm.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    # Bucket keys cut KMS requests (and their cost) by orders of magnitude for frame-sized objects.
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_versioning" "farm" {
  bucket = aws_s3_bucket.farm.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "farm" {
  bucket     = aws_s3_bucket.farm.id
  depends_on = [aws_s3_bucket_versioning.farm]

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    # A job's early upload (workers/phases/s3join.py: segments copied into the output as they are
    # made) stays open while the job renders: a week covers long jobs. The reconciler aborts
    # those of failed and cancelled jobs (FARM_EARLY_UPLOAD_KEEP_H after they ended); this rule
    # is the backstop.
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }

  # Lifecycle filters match literal prefixes only, so jobs/*/frames/ and jobs/*/segments/ cannot
  # be named directly: the store tags those objects farm-data=intermediate when it writes them.
  rule {
    id     = "expire-intermediate-chunk-data"
    status = "Enabled"
    filter {
      and {
        prefix = "jobs/"
        tags = {
          "farm-data" = "intermediate"
        }
      }
    }
    expiration {
      days = var.intermediate_expiry_days
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
  }

  # The API's staged uploads (uploads/<sha256>, PUT through presigned URLs) are moved to their
  # content-addressed key when a submit names them; one no submit took (a client gone, a submit
  # refused) is dropped after a day, and its parts if it was sent in parts.
  rule {
    id     = "expire-abandoned-uploads"
    status = "Enabled"
    filter {
      prefix = "uploads/"
    }
    expiration {
      days = 1
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  rule {
    id     = "expire-noncurrent-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiry_days
    }
    expiration {
      expired_object_delete_marker = true
    }
  }
}

data "aws_iam_policy_document" "tls_only" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    resources = [aws_s3_bucket.farm.arn, "${aws_s3_bucket.farm.arn}/*"]
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid     = "DenyTlsOlderThan12"
    effect  = "Deny"
    actions = ["s3:*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    resources = [aws_s3_bucket.farm.arn, "${aws_s3_bucket.farm.arn}/*"]
    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }
}

resource "aws_s3_bucket_policy" "farm" {
  bucket     = aws_s3_bucket.farm.id
  policy     = data.aws_iam_policy_document.tls_only.json
  depends_on = [aws_s3_bucket_public_access_block.farm]
}
