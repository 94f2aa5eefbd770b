"""A worker container cut off the farm's network mid-chunk for longer than its lease (`podman
network disconnect`), then connected again: its chunk is taken over, what it writes late is
fenced, and it goes back to work."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from farm.core import keys
from farm.core.pipeline import running_states
from tests.conftest import DEMO
from tests.containers.conftest import ContainerFarm, job_objects, podman, writer_of
from tests.containers.test_container_farm import _assert_every_frame_once, _wait_rendering
from tests.e2e.farmtools import status, submit, wait_final, wait_for
from workers.attempt.lifecycle import claim_number

pytestmark = pytest.mark.e2e

RUNNING = {str(state) for state in running_states()}


class Partition:
    """One container off its compose network and back on it, with the names it had there."""

    def __init__(self, farm: ContainerFarm, container: str) -> None:
        info = farm.inspect(container)
        networks = info["NetworkSettings"]["Networks"]  # type: ignore[index]
        assert isinstance(networks, dict) and len(networks) == 1, networks
        ((self.network, attached),) = networks.items()
        # `worker`; the container's own id podman adds again by itself.
        ident = str(info["Id"])
        self.aliases = [a for a in attached.get("Aliases") or [] if not ident.startswith(a)]
        self.container = container
        self.off = False

    def cut(self) -> float:
        podman("network", "disconnect", self.network, self.container)
        self.off = True
        return time.time()

    def heal(self) -> float:
        if self.off:
            aliases = [f"--alias={a}" for a in self.aliases]
            podman("network", "connect", *aliases, self.network, self.container)
            self.off = False
        return time.time()


def _gave_up(container: str, index: int, since: float) -> bool:
    """The container's worker logged the end of its attempt at chunk `index` as a lost lease
    (workers.attempt.policy: LeaseLost) after `since`."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since - 1))
    logs = podman("logs", "--since", stamp, container, check=False)
    said = re.compile(rf"chunk {index}: lease|chunk {index} is another attempt's now")
    return said.search(logs.stdout + logs.stderr) is not None


def test_a_worker_cut_off_past_its_lease_is_fenced_then_goes_back_to_work(
    container_farm: ContainerFarm, tmp_path: Path
) -> None:
    """GIVEN a render job on the worker containers, one of them (A) mid-chunk with a frame stored
    WHEN A is cut off the network (`podman network disconnect`) THEN its lease expires and
    another worker claims the chunk, reusing the frames A stored;
    WHEN A is connected again while that worker renders THEN what A writes late replaces none of
    the winner's objects and no frame record names it, the job ends done with every frame
    in the video once and rendered once, and A heartbeats again and takes a chunk of a next job."""
    farm = container_farm
    running = [c for c in farm.containers("worker") if farm.inspect(c)["State"]["Running"]]  # type: ignore[index]
    assert len(running) >= 2, f"the partition needs 2 worker containers: {running}"
    cut, others = running[0], running[1:]
    cut_worker = farm.worker_name(cut)
    partition = Partition(farm, cut)
    ledger = farm.ledger()
    # Two chunks of 12: A's is cut early, and the other worker is busy when A's lease ends.
    job_id = submit(farm, DEMO, "--frames", "1-24", "--chunk-size", "12", "--samples", "24")
    index = _wait_rendering(farm, job_id, cut_worker)
    try:
        cut_at = partition.cut()
        held = ledger.chunk(job_id, index)
        assert held["worker"] == cut_worker and held["state"] in RUNNING, held
        stale_token = held["token"]
        stale = keys.writer(index, claim_number(stale_token))
        stored = {f: r for f, r in ledger.frame_records(job_id).items() if r.writer == stale}
        assert stored, "the cut worker recorded no frame before the cut"

        def taken_over() -> bool:
            chunk = ledger.chunk(job_id, index)
            return bool(chunk["token"] != stale_token and chunk.get("worker") != cut_worker)

        wait_for(f"another worker to claim chunk {index}", taken_over, 900, farm)
        won = ledger.chunk(job_id, index)
        winner = keys.writer(index, claim_number(won["token"]))
        expired = [e for e in ledger.events(job_id) if e.get("chunk") == index
                   and "lease expired" in e.get("error", "")]  # fmt: skip
        assert len(expired) == 1 and expired[0]["t"] > cut_at, expired
        assert (int(won["lost_leases"]), int(won.get("failures", 0))) == (1, 0), won

        def winner_stored() -> bool:  # or is past rendering it: nothing was left to render
            mine = any(r.writer == winner for r in ledger.frame_records(job_id).values())
            return mine or ledger.chunk(job_id, index)["state"] != won["state"]

        wait_for("the chunk's new owner to store a frame", winner_stored, 600, farm)
        before = job_objects(farm, job_id)
    finally:
        back_at = partition.heal()

    summary = wait_final(farm, job_id, 900)
    assert summary["state"] == "done", f"{summary['error']}\n{farm.logs()}"
    done = job_objects(farm, job_id)
    wait_for(
        f"{cut_worker} to give chunk {index} up", lambda: _gave_up(cut, index, cut_at), 300, farm
    )
    wait_for(
        f"{cut_worker} to heartbeat again",
        lambda: ledger.workers().get(cut_worker, {}).get("seen", 0) > back_at,
        300,
        farm,
    )
    # A is back at work: it takes a chunk of the next job, the other workers paused (`podman
    # pause`) so that none takes every chunk first while A's broker connection comes back.
    podman("pause", *others)
    try:
        next_id = submit(farm, DEMO, "--frames", "1-4", "--chunk-size", "1", "--samples", "4")
        wait_for(
            f"{cut_worker} to claim a chunk of the next job",
            lambda: any(e["event"] == "chunk-rendering" and e.get("worker") == cut_worker
                        for e in ledger.events(next_id)),
            600,
            farm,
        )  # fmt: skip
    finally:
        podman("unpause", *others)
    assert wait_final(farm, next_id, 600)["state"] == "done", farm.logs()
    after = job_objects(farm, job_id)

    # Nothing the job had when A came back was replaced (logs grow as their own claim writes
    # them; the reconciler keeps the job's spend in control.json), and whatever changed once the
    # job was done is A's, under its own claim's names: the delivered video is as stitched.
    control = keys.control_key(job_id)
    replaced = {k: (v, after.get(k)) for k, v in before.items()
                if "/logs/" not in k and k != control and after.get(k) != v}  # fmt: skip
    assert replaced == {}, replaced
    late = {k for k, found in after.items() if k != control and done.get(k) != found}
    assert {writer_of(key) for key in late} <= {stale}, late
    assert after[keys.output_key(job_id)] == done[keys.output_key(job_id)]
    # The frames A stored before the cut are the chunk's still, rendered once; no record names
    # what A stored after it, and the chunk was encoded by the winner.
    records = ledger.frame_records(job_id)
    assert {f: r for f, r in records.items() if r.writer == stale} == stored
    assert ledger.render_counts(job_id) == {frame: 1 for frame in range(1, 25)}
    final = ledger.chunk(job_id, index)  # its encode is the winner's next claim
    assert final["worker"] == won["worker"] and writer_of(final["manifest"]) not in (stale, None)
    assert status(farm, job_id)["chunks"][index]["failures"] == 0
    _assert_every_frame_once(farm, job_id, tmp_path)
    late_writes = sorted(k for k in after if writer_of(k) == stale and k not in before)
    print(f"\ncut off {back_at - cut_at:.0f} s; chunk {index}: {len(stored)} stored frames "
          f"reused; {len(late_writes)} objects written late under {stale}")  # fmt: skip
