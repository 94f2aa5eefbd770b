"""What the farm serves over HTTP: the API (api/), the job pages (app, jobpage, templates/, and
their login session) and the Prometheus exporter, on tornado's HTTP server (server)."""
