"""The ledger's scripts on a real Redis: sent by EVALSHA alone, and loaded again by themselves
after Redis loses them (SCRIPT FLUSH, as a restart does)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import fields
from typing import Any

from farm.core.pipeline import PHASES, Phase
from farm.core.plan import Chunk
from farm.core.state import ChunkState, JobState
from farm.ledger import Ledger
from farm.ledger.lua import Scripts, source
from tests.integration.conftest import make_job

RENDER, SEGMENT = PHASES[Phase.RENDER], PHASES[Phase.SEGMENT]


def _walk(ledger: Ledger, job_id: str) -> dict[str, Any]:
    """A job's way through the ledger, every script on it at least once; what each step said."""
    make_job(ledger, job_id)  # chunks 0 (frames 1-10) and 1 (11-20)
    seen: dict[str, Any] = {}
    claim = ledger.claim(job_id, 0, RENDER.running, only_from=RENDER.claim_from, lease_s=30,
                         worker="w1")  # fmt: skip
    token = claim.move.token
    seen["claimed"] = (claim.move.status, claim.frames)
    seen["renewed"] = ledger.renew(job_id, 0, token, 30)
    seen["frame recorded"] = ledger.record_frame(
        job_id, 1, 10, "ab" * 32, writer="0-1", token=token, chunk=0, frames_rendered=1
    ).recorded
    seen["split into"] = ledger.split_chunk(job_id, 0, token=token, last_frame=5, chunks_total=2)
    moved, segment = ledger.move_then_claim(
        job_id, 0, RENDER.done, token=token, fields={}, then=SEGMENT.running,
        then_from=SEGMENT.claim_from, lease_s=30, worker="w1",
    )  # fmt: skip
    assert segment is not None
    seen["rendered, then claimed"] = (moved.status, segment.move.status)
    done = ledger.move_chunk(job_id, 0, SEGMENT.done, token=segment.move.token, gate=True)
    seen["done, gate"] = (done.status, done.gate)
    seen["early upload"] = (
        ledger.job_field_once(job_id, "early_upload", "u1"),
        ledger.job_field_once(job_id, "early_upload", "u2"),
    )
    seen["planned the rest"] = ledger.plan_rest(
        job_id, after=3, chunks=[Chunk(index=3, frames=(21,))], chunk_size=1, reason="test"
    )
    ledger.drop_lease(job_id, 1, expired_by=time.time())
    seen["paused"] = ledger.move_job(job_id, JobState.PAUSED).status
    seen["cancelled"] = ledger.move_job(job_id, JobState.CANCELLED).status
    seen["stitch gate"] = ledger.try_start_stitch(job_id)
    seen["notices claimed"] = len(
        [member for member in ledger.claim_notices() if f'"job_id": "{job_id}"' in member]
    )
    seen["remade"] = ledger.remake_chunk(job_id, 0, "its segment is gone", ChunkState.RENDERED)
    seen["early upload forgotten"] = ledger.forget_early_upload(job_id, "u1")
    seen["claims raised"] = ledger.raise_claims(job_id, {0: 99})
    # Frames are fixed only in a done job: a cancelled one is left as it is.
    seen["frames fixed"] = ledger.fix_frames(job_id, frames=[1], chunks=[0], fields={})
    seen["marked"] = ledger.advance_mark(None) is not None
    seen["live"] = job_id in ledger.live_job_ids()
    return seen


def _commands(ledger: Ledger) -> dict[str, int]:
    stats: dict[str, dict[str, int]] = ledger.r.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()}


def _sha(name: str) -> str:
    """The SHA1 that EVALSHA names the script by (redis-py's Script.sha)."""
    return hashlib.sha1(source(name).encode()).hexdigest()


def test_every_script_compiles_in_redis(ledger: Ledger) -> None:
    for f in fields(Scripts):
        assert ledger.r.script_load(source(f.name)) == _sha(f.name)


def test_the_scripts_go_by_evalsha_and_survive_a_script_flush(ledger: Ledger) -> None:
    # GIVEN a Redis that holds none of the scripts, its command counts starting now
    ledger.r.script_flush()
    ledger.r.config_resetstat()
    # WHEN a job walks through the ledger, Redis forgets every script, and another job walks
    first = _walk(ledger, "j1")
    ledger.r.script_flush()
    second = _walk(ledger, "j2")
    # THEN both walks went the same way, as a job does
    assert first == second
    assert first == {
        "claimed": ("ok", list(range(1, 11))),
        "renewed": "ok",
        "frame recorded": True,
        "split into": 2,
        "rendered, then claimed": ("ok", "ok"),
        "done, gate": ("ok", False),
        "early upload": ("u1", "u1"),
        "planned the rest": False,
        "paused": "ok",
        "cancelled": "ok",
        "stitch gate": False,
        "notices claimed": 2,
        "remade": True,
        "early upload forgotten": True,
        "claims raised": 1,
        "frames fixed": False,
        "marked": True,
        "live": False,
    }
    # AND every script was sent by its SHA, never as a body: loaded once by its first call
    # after each flush (NOSCRIPT, then SCRIPT LOAD), and there again at the end
    commands = _commands(ledger)
    assert commands.get("evalsha", 0) > 0
    assert [name for name in commands if name.startswith("eval") and name != "evalsha"] == []
    assert commands["script|load"] == 2 * len(fields(Scripts))
    shas = [_sha(f.name) for f in fields(Scripts)]
    assert ledger.r.script_exists(*shas) == [True] * len(shas)
