"""The control plane's work: submitting jobs (intake, estimate, uploads: a submit's staged files
checked by hash), steering them after (jobs), the reconciler and completion gate (reconcile), the
ledger rebuilt from the store (rebuild), the people who may use the API (users) and the projects
that share the farm (projects), webhooks, the census behind metrics, and the local farm that
`farm up` starts (local: its processes' record in processes, its Redis and SeaweedFS in stores;
containers; and each role's credentials: credentials). Talks to workers only through the ledger
and Celery messages, never by import."""
