"""The farm's edges to the machine and the cloud: the S3 store, the one place that runs programs
(proc) and the bubblewrap box it runs untrusted ones in (sandbox; the media box in boxes), TLS, settings and private files,
SeaweedFS's security file, CloudWatch metrics and CPU pinning. Each side effect lives in one
module here; they import only the core."""
