"""What the farm serves over HTTP: the job pages (app, jobpage, templates/) and the Prometheus
exporter, on tornado's HTTP server (server)."""
