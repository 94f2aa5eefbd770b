"""What the farm serves over HTTP: the job pages (app, jobpage) and the Prometheus exporter."""
