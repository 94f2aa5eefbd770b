"""The box's argv is pure: bwrap flags for no network, a clean environment and the chunk's mounts."""

from __future__ import annotations

from pathlib import Path

from farm.sandbox import Box, minimal_env, tmpfs_cap, unwrapped_returncode, wrap

WORKER_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/root",
    "FARM_REDIS_URL": "redis://:pw@10.0.0.5:6379/0",
    "AWS_SECRET_ACCESS_KEY": "s",
    "REDIS_PASSWORD": "pw",
    "CUDA_VISIBLE_DEVICES": "0",
}


def flag_pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_minimal_env_keeps_the_allowlist_and_never_a_credential() -> None:
    env = minimal_env(WORKER_ENV, home="/scratch/chunk")
    assert env == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/scratch/chunk",
        "CUDA_VISIBLE_DEVICES": "0",
    }


def test_wrap_has_no_network_a_clean_env_and_the_program_last() -> None:
    box = Box(
        writable=(Path("/s/jobs/j/render-00001"), Path("/s/jobs/j/frames")),
        readable=(Path("/s/jobs/j/tree"),),
        env={"FARM_X": "no", "TZ": "UTC"},
    )
    argv = wrap(["blender", "-b", "x.blend"], box, environ=WORKER_ENV)
    assert argv[0] == "bwrap"
    assert {"--unshare-all", "--die-with-parent", "--new-session", "--clearenv"} <= set(argv)
    assert "--share-net" not in argv
    assert argv[-4:] == ["--", "blender", "-b", "x.blend"]
    assert flag_pairs(argv, "--setenv") == [
        "CUDA_VISIBLE_DEVICES", "HOME", "LANG", "PATH", "TMPDIR", "TZ"
    ]  # fmt: skip
    assert "--cap-drop" in argv and argv[argv.index("--cap-drop") + 1] == "ALL"
    assert not any("pw" in a or "FARM_" in a or "AWS_" in a for a in argv)
    assert flag_pairs(argv, "--bind") == ["/s/jobs/j/frames", "/s/jobs/j/render-00001"]
    assert "/s/jobs/j/tree" in flag_pairs(argv, "--ro-bind")
    assert flag_pairs(argv, "--chdir") == ["/s/jobs/j/render-00001"]


def test_a_writable_folder_inside_a_read_only_tree_is_mounted_after_it() -> None:
    box = Box(writable=(Path("/s/tree/out"),), readable=(Path("/s/tree"),))
    argv = wrap(["true"], box, environ={})
    mounts = [a for i, a in enumerate(argv) if argv[i - 1] in ("--ro-bind", "--bind")]
    assert mounts.index("/s/tree") < mounts.index("/s/tree/out")


def test_a_signal_inside_the_box_reads_as_that_signal() -> None:
    assert unwrapped_returncode(139) == -11  # SIGSEGV inside: bwrap exits 128+11
    assert unwrapped_returncode(137) == -9
    assert unwrapped_returncode(-15) == -15  # bwrap itself stopped
    assert unwrapped_returncode(3) == 3 and unwrapped_returncode(0) == 0


def test_a_bwrap_without_size_gets_an_uncapped_tmp_rather_than_no_box(tmp_path: Path) -> None:
    """Ubuntu 22.04's bubblewrap 0.6 refuses --size: every render would fail with it."""
    old = tmp_path / "bwrap"
    old.write_text(
        '#!/bin/sh\ncase "$*" in *--size*) echo "Unknown option --size" >&2; exit 1;; esac\n'
    )
    old.chmod(0o755)
    assert tmpfs_cap(str(old)) == 0
    argv = wrap(["true"], Box(writable=(tmp_path,), bwrap=str(old), tmpfs_bytes=0), environ={})
    assert "--size" not in argv and argv.count("--tmpfs") == 2
    capped = wrap(["true"], Box(writable=(tmp_path,)), environ={})
    assert capped[capped.index("--size") + 1] == str(256 * 1024 * 1024)
