"""The box's argv is pure: bwrap flags for no network, a clean environment and the chunk's mounts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from farm.adapters.sandbox import Box, minimal_env, unwrapped_returncode, wrap
from workers.host.box import tmpfs_cap, userns_cap

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
    passed = [
        a for i, a in enumerate(argv) if argv[i - 1] in ("--setenv", *flag_pairs(argv, "--setenv"))
    ]
    assert not any("pw" in a or "FARM_" in a or "AWS_" in a for a in passed)
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
    assert "--size" not in argv and flag_pairs(argv, "--tmpfs")[:2] == ["/tmp", "/run"]
    capped = wrap(["true"], Box(writable=(tmp_path,)), environ={})
    assert capped[capped.index("--size") + 1] == str(256 * 1024 * 1024)


def test_code_in_the_box_cannot_make_a_user_namespace_of_its_own(tmp_path: Path) -> None:
    """Found by a review: inside the box a crafted scene's code could unshare a user namespace,
    and hold every capability again in it (the first step of the usual kernel exploits).
    Runs the real bwrap: this is what a render's box does."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bubblewrap is part of the setup (make setup)"
    assert userns_cap(bwrap), "bubblewrap 0.8+ (Debian 12's) has --disable-userns"
    box = Box(writable=(tmp_path,), bwrap=bwrap, no_userns=True)
    argv = wrap(["unshare", "--user", "true"], box)
    assert argv[1:4] == ["--unshare-all", "--unshare-user", "--disable-userns"]
    refused = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "unshare failed" in refused.stderr
    allowed = wrap(["unshare", "--user", "true"], Box(writable=(tmp_path,), bwrap=bwrap))
    assert subprocess.run(allowed, capture_output=True, check=False).returncode == 0  # before


def test_a_host_where_bwrap_cannot_make_a_box_refuses_to_start_a_worker(
    tmp_path: Path,
) -> None:
    """Found by a review: in a container run without the rights bwrap needs, the worker started
    (bwrap was installed) and every chunk of every job failed in milliseconds. A stitch or
    encode worker boxes its ffmpeg (a master is untrusted), so it refuses too."""
    from farm.adapters.settings import Settings
    from farm.core.errors import ConfigError
    from workers.host.box import check_host

    refusing = tmp_path / "bwrap"
    refusing.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    refusing.chmod(0o755)
    with pytest.raises(ConfigError, match=r"cannot make a box on this host \(bwrap: No perm"):
        check_host(Settings(), ["render", "stitch"], bwrap=str(refusing))
    with pytest.raises(ConfigError, match=r"cannot make a box on this host"):
        check_host(Settings(), ["stitch"], bwrap=str(refusing))
    check_host(Settings(sandbox="off"), ["encode"], bwrap=str(refusing))  # no box asked for
    check_host(Settings(), ["render"])  # this host's bwrap makes one


def test_what_not_everyone_may_read_in_etc_is_empty_inside_the_box(tmp_path: Path) -> None:
    """Found by a review: a worker running as root boxed /etc whole, and with it what only root
    may read: a Redis config with its password, TLS private keys, shadow's backup."""
    from farm.adapters.sandbox import private_system_paths

    etc = tmp_path / "etc"
    (etc / "redis").mkdir(parents=True)
    (etc / "redis" / "redis.conf").write_text("requirepass s3cret\n")
    (etc / "redis").chmod(0o750)
    (etc / "shadow-").write_text("root:$6$...\n")
    (etc / "shadow-").chmod(0o600)
    (etc / "fonts.conf").write_text("<fontconfig/>\n")
    files, folders = private_system_paths(str(etc))
    assert (files, folders) == ((str(etc / "shadow-"),), (str(etc / "redis"),))
    private_system_paths.cache_clear()
    argv = wrap(["true"], Box(writable=(tmp_path,)), environ={})
    files, folders = private_system_paths()
    assert all(argv[argv.index(f) - 1] == "/dev/null" for f in files)
    assert all(argv[argv.index(d) - 1] == "--tmpfs" for d in folders)
