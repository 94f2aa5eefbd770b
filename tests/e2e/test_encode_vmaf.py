"""`--target-quality vmaf=N` on the local farm: each chunk's CRF chosen on probes scored by
libvmaf (imageio-ffmpeg's ffmpeg, in the box), its VMAF recorded beside SSIM and PSNR and shown
by `farm status` and `--json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import LocalFarm
from tests.e2e.test_encode_quality import _busy_then_flat, _manifests, _submit

pytestmark = pytest.mark.e2e


def test_a_vmaf_target_chooses_each_chunks_crf_and_records_its_vmaf(
    local_farm: LocalFarm, tmp_path: Path
) -> None:
    # GIVEN a master of a busy half and a flat half, transcoded in two segments to a VMAF target
    summary = _submit(
        local_farm, _busy_then_flat(tmp_path / "m.mov"), "--target-quality", "vmaf=80"
    )
    job_id = summary["id"]
    # WHEN its status is asked for as JSON
    shown = json.loads(local_farm.farm("status", job_id, "--json", check=True).stdout)
    # THEN each chunk has a VMAF score and the CRF its probes chose
    chunks = shown["chunks"]
    assert len(chunks) == 2
    assert all(0 < c["vmaf"] <= 100 and 0.5 < c["ssim"] <= 1 for c in chunks), chunks
    crfs = [c["quality"] for c in chunks]
    assert all(isinstance(q, int) and 0 <= q <= 51 for q in crfs), crfs
    assert shown["quality"]["vmaf_worst"] == min(c["vmaf"] for c in chunks)
    assert shown["spec"]["target_quality"] == "vmaf=80"
    # ... each manifest records the VMAF, the probes (VMAF scores) and the CRF it was encoded at
    manifests = _manifests(local_farm, job_id)
    assert [m["quality"]["vmaf"] for m in manifests] == [c["vmaf"] for c in chunks]
    assert [m["encoder"]["quality"] for m in manifests] == crfs
    for m, q in zip(manifests, crfs, strict=True):
        probes = {int(k): v for k, v in m["quality"]["probes"].items()}
        assert q in probes and all(0 < v <= 100 for v in probes.values()), probes
        assert m["quality"]["target_met"] == (probes[q] >= 80), m["quality"]
    # ... and `farm status` shows the VMAF column and the job's VMAF line
    text = local_farm.farm("status", job_id, check=True).stdout
    assert "VMAF worst" in text and "target vmaf=80" in text, text
    assert f"{chunks[0]['vmaf']:.2f}" in text, text
