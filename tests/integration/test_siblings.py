"""`farm submit --each` siblings on a real Redis and SeaweedFS: the ledger records each one's
group, a sibling's status lists the others, and a ledger rebuilt from the store keeps the group."""

from __future__ import annotations

from farm.adapters.store import Store
from farm.control.rebuild import rebuild
from farm.control.status import job_status
from farm.core import keys
from farm.core.plan import plan_chunks
from farm.core.siblings import expand
from farm.core.sources import SceneInfo
from farm.core.spec import Each, JobSpec, build_render_spec
from farm.ledger import Ledger

GROUP = "g-20261206-101500-0a1b2c"


def _siblings() -> tuple[JobSpec, ...]:
    scene = SceneInfo(
        scene="Scene", blender_version="4.5", frame_start=1, frame_end=4, frame_step=1, fps=24,
        fps_base=1.0, resolution_x=64, resolution_y=36, resolution_percentage=100,
        camera="Wide", engine="CYCLES", samples=1, denoising=False,
        view_layers=("Both", "BlueOnly"), file_format="PNG", color_depth="8", color_mode="RGB",
        cameras=("CamA", "CamB"),
    )  # fmt: skip
    spec = build_render_spec(source_name="shot.blend", frames=None, chunk_size=2,
                             resolution=None, fps=None, samples=None, codec="h264", scene=scene)  # fmt: skip
    return expand(spec, Each.CAMERA, group_id=GROUP).specs


def test_a_siblings_status_lists_the_others_and_a_rebuilt_ledger_keeps_them(
    ledger: Ledger, store: Store
) -> None:
    # GIVEN two siblings, submitted as intake records them (ledger and store)
    ids = ("j-sib-a", "j-sib-b")
    for job_id, spec in zip(ids, _siblings(), strict=True):
        chunks = plan_chunks(spec.frames, 2)
        ledger.create_job(job_id=job_id, spec=spec, chunks=chunks, source_key="k")
        store.put_json(keys.spec_key(job_id), {
            "id": job_id, "spec": spec.to_json(), "source_key": "k", "source_sha256": "0" * 64,
            "chunks": [list(c.frames) for c in chunks], "submitted": 1.0, "control": {},
        })  # fmt: skip
    # THEN each records its group, and one's status names the other and what it renders
    assert ledger.job("j-sib-a")["group"] == GROUP
    assert ledger.group(GROUP) == list(ids)
    shown = job_status(ledger, "j-sib-a")
    assert shown["group"]["member"] == "CamA"
    assert shown["siblings"] == [{"id": "j-sib-b", "state": "queued", "member": "CamB"}]
    # WHEN Redis loses everything and the ledger is rebuilt from the store
    ledger.r.flushdb()
    rebuild(ledger, store, None)
    # THEN the group is back, both ways
    assert ledger.job("j-sib-b")["group"] == GROUP
    assert sorted(ledger.group(GROUP)) == sorted(ids)
    assert job_status(ledger, "j-sib-b")["siblings"][0]["member"] == "CamA"
