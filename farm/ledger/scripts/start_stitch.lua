-- The completion gate on its own (Ledger.try_start_stitch: the reconciler's backstop; a worker's
-- last done move opens it in chunk_move).
-- KEYS: 1 job hash, 2 job events list; ARGV: 1 now. Returns 1 for the one winner, else 0.
{{ include gate }}
return open_gate(KEYS[1], KEYS[2], ARGV[1], '')
