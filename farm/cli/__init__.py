"""The `farm` command: its group and job commands (main), submit, pause/resume/cancel (control),
the commands that start the farm's processes (serve), and the live terminal view (watch). Logging
is configured here and nowhere below."""
