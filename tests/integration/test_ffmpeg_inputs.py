"""ffmpeg and ffprobe read exactly the file they are given, and https (the store's, for a
deliverable it assembled) only from a trusted server.

Real ffprobe/ffmpeg on masters with names ffmpeg would read as a protocol or an option, and on a
local https server whose certificate comes from a CA of the test's own."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.adapters.proc import capture
from farm.core.errors import StoreError
from farm.media import probe
from farm.media.join import probe_header
from farm.media.master import probe_master
from farm.media.probe import Streams
from tests.integration.tls_certs import make_certs

FFMPEG = ["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]


def make_video(path: Path, seconds: float) -> Path:
    subprocess.run(
        [*FFMPEG, "-f", "lavfi", "-i", f"testsrc2=s=64x48:r=24:d={seconds}", "-c:v", "libx264",
         "-pix_fmt", "yuv420p", "-f", "mp4", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.mark.parametrize("name", ["file:one_frame.mp4", "-x.mov", "concat:a.mp4|b.mp4"])
def test_a_master_with_a_tricky_name_is_probed_as_that_file(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a 48-frame master named like a protocol or an option, beside a 1-frame decoy it could
    be mistaken for, WHEN it is probed at submit THEN 48 frames are found."""
    monkeypatch.chdir(tmp_path)
    for decoy in ("one_frame.mp4", "a.mp4", "b.mp4"):
        make_video(tmp_path / decoy, 1 / 24)
    master = make_video(tmp_path / name, 2)
    probed = probe_master("ffprobe", "ffmpeg", Path(name))
    assert probed.info.frame_count == 48
    assert master.exists()


def test_the_bare_name_is_what_ffprobe_misreads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack, observed: given the bare name, ffprobe reads the decoy (1 frame)."""
    monkeypatch.chdir(tmp_path)
    make_video(tmp_path / "one_frame.mp4", 1 / 24)
    make_video(tmp_path / "file:one_frame.mp4", 2)
    bare = capture(probe.streams_argv("ffprobe", "file:one_frame.mp4"))
    assert probe.parse_streams(bare.stdout).frames == 1
    named = capture(probe.streams_argv("ffprobe", probe.input_name(Path("file:one_frame.mp4"))))
    assert probe.parse_streams(named.stdout).frames == 48


def test_input_name_keeps_urls_and_makes_files_absolute(tmp_path: Path) -> None:
    url = "https://s3.example.com/farm/m.mov?X-Amz-Signature=abc"
    assert probe.input_name(url) == url
    assert probe.input_name(tmp_path / "-x.mov") == f"file:{tmp_path}/-x.mov"
    assert probe.input_name(Path("https://x")).startswith("file:/")


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A local https server with a certificate from a CA of its own: (base URL, CA file)."""
    d = tmp_path_factory.mktemp("tls")
    certs = make_certs(d)
    make_video(d / "m.mp4", 1)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(d), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.cert, certs.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}", certs.ca
    server.shutdown()


def _probe_url(url: str, ca_file: str) -> Streams:
    """The worker's probe of a deliverable the store assembled (workers.phases.s3join)."""
    return probe_header("ffprobe", url, name="output.mp4",
                        options=probe.option_args(probe.input_options(url, ca_file)))  # fmt: skip


def test_ffprobe_refuses_the_store_url_of_an_untrusted_server(
    https_server: tuple[str, Path],
) -> None:
    base, _ = https_server
    with pytest.raises(StoreError, match=r"certificate|SSL|TLS"):
        _probe_url(f"{base}/m.mp4", probe.DEFAULT_CA_FILE)


def test_ffprobe_reads_the_store_url_of_a_server_its_ca_file_trusts(
    https_server: tuple[str, Path],
) -> None:
    base, ca = https_server
    assert _probe_url(f"{base}/m.mp4", str(ca)).frames == 24


def test_ffprobe_without_the_flags_would_read_an_untrusted_server(
    https_server: tuple[str, Path],
) -> None:
    """The attack, observed: ffprobe's default does not verify the certificate."""
    base, _ = https_server
    assert capture(["ffprobe", "-v", "error", "-show_format", f"{base}/m.mp4"]).returncode == 0
