"""The control plane's work: submitting jobs (jobs, estimate), the reconciler and completion gate
(reconcile), the ledger rebuilt from the store (rebuild), webhooks, the census behind metrics, and
the local farm that `farm up` starts (local: its processes' record in processes, its Redis and
SeaweedFS in stores; containers; and each role's credentials: credentials). Talks to workers only
through the ledger and Celery messages, never by import."""
