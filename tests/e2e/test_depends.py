"""Jobs that wait for others on a real local farm: a tiny render, then a job that waits for it and
runs after it (direct mode); a waiting job submitted through the API whose parent is cancelled
is cancelled, saying why."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DEMO, LocalFarm
from tests.e2e.farmtools import status, submit, wait_final, wait_for
from tests.e2e.test_api_client import Client, _client, _user

pytestmark = pytest.mark.e2e
TINY = ("--frames", "1-2", "--chunk-size", "2", "--samples", "1")


def test_a_job_waits_for_its_parent_render_and_runs_after_it(local_farm: LocalFarm) -> None:
    # GIVEN a tiny render, and a job submitted to wait for it
    parent = submit(local_farm, DEMO, *TINY)
    said = local_farm.farm("submit", str(DEMO), *TINY, "--resolution", "320x180",
                           "--after", parent, "--json", check=True)  # fmt: skip
    child = json.loads(said.stdout)
    assert child["state"] == "waiting"
    # THEN the child runs once the parent is done, and not before
    assert wait_final(local_farm, child["id"], 300)["state"] == "done"
    ledger = local_farm.ledger()
    parent_done = float(ledger.job(parent)["finished"])
    assert all(float(c["started"]) >= parent_done for c in ledger.chunks(child["id"]))
    # AND its status shows the chain, both ways
    text = local_farm.farm("status", child["id"], check=True).stdout
    assert f"after   {parent} (done): released" in text
    children = json.loads(local_farm.farm("status", parent, "--json", check=True).stdout)
    assert children["children"] == [{"id": child["id"], "state": "done"}]
    # AND a parent the farm does not know is refused with its id
    refused = local_farm.farm("submit", str(DEMO), *TINY, "--after", "j-20990101-000000-abcdef")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--after j-20990101-000000-abcdef: no such job on this farm" in refused.stderr


def test_a_parent_cancelled_cancels_its_waiting_child_through_the_api(
    local_farm: LocalFarm, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # GIVEN an artist on the API with a long job, and a job of theirs waiting for it
    artist: Client = _client(tmp_path_factory, "dep-ann")
    token = _user(local_farm, "dep-ann", "artist")
    artist.ok("login", local_farm.settings()["web_url"], "--token-stdin", stdin=token + "\n")
    parent = artist.ok("submit", str(DEMO), "--frames", "1-240", "--chunk-size", "4",
                       "--resolution", "320x180", "--samples", "1").stdout.strip()  # fmt: skip
    child = json.loads(artist.ok("submit", str(DEMO), *TINY, "--resolution", "320x180",
                                 "--after", parent, "--json").stdout)  # fmt: skip
    assert child["state"] == "waiting"
    shown = json.loads(artist.ok("status", child["id"], "--json").stdout)
    assert shown["after"][0]["id"] == parent and shown["state"] == "waiting"
    # WHEN the parent is cancelled
    artist.ok("cancel", parent)
    # THEN the child is cancelled, its error naming the parent and what happened to it
    wait_for(
        "the child's cancel",
        lambda: status(local_farm, child["id"])["state"] == "cancelled",
        120,
        local_farm,
    )
    error = status(local_farm, child["id"])["error"]
    assert error == f"parent job {parent} was cancelled: cancelled by a user"
    assert all(c["attempt"] == 0 for c in status(local_farm, child["id"])["chunks"])  # never ran
