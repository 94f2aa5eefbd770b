"""The attempt machinery every phase runs through: claim, lease and renewals, the child program,
upload, verification and hand-off (lifecycle, lease), the per-process context a phase reads, and
the wake-ups that end waits early (wake)."""
