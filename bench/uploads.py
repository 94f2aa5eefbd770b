"""`python -m bench.uploads [--mb 200] [--files 20]`: `farm submit` of a scene with MB of textures,
the first time (every file uploaded), the second (deduplicated by hash: nothing uploaded) and after
one texture changed (that file only), each beside `cp -r` of the same bytes on local disk.

The scene is scenes/textured.blend with its texture turned into an image sequence of incompressible
files (BAT rewrites the image block), so no Blender is needed; the farm has no workers and each job
is cancelled once queued.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from blender_asset_tracer import blendfile

from bench.common import ROOT, start_farm

IMA_SRC_SEQUENCE = 2


def make_scene(base: Path, total_mb: int, files: int) -> Path:
    shot = base / "shot"
    (shot / "tex").mkdir(parents=True)
    shutil.copytree(ROOT / "scenes" / "lib", shot / "lib")
    scene = shot / "shot.blend"
    shutil.copyfile(ROOT / "scenes" / "textured.blend", scene)
    each = total_mb * 1024 * 1024 // files
    for i in range(1, files + 1):
        (shot / "tex" / f"big_{i:04d}.png").write_bytes(os.urandom(each))
    bfile = blendfile.BlendFile(scene, "r+b")
    try:
        image = next(b for b in bfile.find_blocks_from_code(b"IM") if b.id_name == b"IMchecker.png")
        image[b"source"] = IMA_SRC_SEQUENCE
        image[b"name"] = b"//tex/big_0001.png"
    finally:
        bfile.close()
    return scene


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.monotonic()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> {out.returncode}: {out.stderr}")
    return took, out.stdout


def run(total_mb: int, files: int) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="farm-bench-assets-"))
    farm = start_farm(workers=0, base=base / "farm")
    try:
        scene = make_scene(base, total_mb, files)
        cp_s, _ = _timed(["cp", "-r", str(scene.parent / "tex"), str(base / "tex-copy")])
        rows: dict[str, Any] = {"mb": total_mb, "files": files, "cp_s": round(cp_s, 3)}
        submit = ["python", "-m", "farm", "submit", str(scene), "--chunk-size", "5", "--json"]
        for case in ("first", "second", "one_changed"):
            if case == "one_changed":
                (scene.parent / "tex" / "big_0001.png").write_bytes(
                    os.urandom(total_mb * 1024 * 1024 // files)
                )
            took, out = _timed(submit, farm.env)
            reply = json.loads(out)
            farm.farm("cancel", reply["id"])
            rows[case] = {
                "submit_s": round(took, 3),
                "vs_cp": round(took / cp_s, 1),
                **reply["assets"],
            }
        return rows
    finally:
        farm.close()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    rows = run(args.mb, args.files)
    print(json.dumps(rows, indent=2))
    for case in ("first", "second", "one_changed"):
        row = rows[case]
        print(
            f"{case:<12} submit {row['submit_s']:6.2f} s  uploaded {row['uploaded']:>3} files "
            f"({row['bytes_uploaded'] / 2**20:6.1f} MiB), reused {row['reused']:>3}  "
            f"{row['vs_cp']:>5.1f}x cp -r ({rows['cp_s']:.2f} s)"
        )


if __name__ == "__main__":
    main()
