"""Reading an untrusted .blend at submit is bounded (farm.blender.blendfile.BoundedOpener, run by
farm.blender.isolated): a .blend bomb is refused by the cap it crosses, saying how to raise it,
and leaves no temporary file. Hostile files are made here from bytes."""

from __future__ import annotations

import re
import struct
import tempfile
from pathlib import Path

import pytest
import zstandard

from farm.blender.assets import Sources, read_and_trace, trace_scene
from farm.blender.blendfile import BlendCaps
from farm.core.errors import SpecError

SCENES = Path(__file__).resolve().parents[2] / "scenes"
_MIB = 1024 * 1024


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temp dir every temporary file of the read goes to, watched by the test."""
    where = tmp_path / "temp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def _zstd_bomb(path: Path, gib: int) -> None:
    """A .blend header, then `gib` GiB of zeros, compressed as it streams: never held whole."""
    zeros = bytes(_MIB)
    with path.open("wb") as out, zstandard.ZstdCompressor(level=1).stream_writer(out) as z:
        z.write(b"BLENDER-v304REND")
        for _ in range(gib * 1024):
            z.write(zeros)


def _raw(blend: Path) -> bytes:
    data = blend.read_bytes()
    if data[:4] == b"\x28\xb5\x2f\xfd":  # zstd, as Blender's "Compress" saves
        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    assert data[:12] == b"BLENDER-v304"
    return data


def _blocks(data: bytes) -> list[tuple[int, int, bytes]]:
    """(start, end, code) of each block of a 3.x little-endian 64-bit file."""
    found, pos = [], 12
    while True:
        code, length = struct.unpack_from("<4si", data, pos)
        found.append((pos, pos + 24 + (0 if code == b"ENDB" else length), code))
        if code == b"ENDB":
            return found
        pos += 24 + length


def _with_libraries(src: Path, dest: Path, count: int) -> None:
    """`src` (which links one library) with `count` more libraries, each its own file name."""
    data = _raw(src)
    blocks = _blocks(data)
    start, end, _ = next(b for b in blocks if b[2][:2] == b"LI")
    li = data[start:end]
    named = li.index(b"//lib/prop.blend\0")
    copies = bytearray()
    for i in range(count):
        one = bytearray(li)
        path = f"//lib/p{i:05d}.blend\0".encode()
        one[named : named + len(path)] = path
        struct.pack_into("<Q", one, 8, 0x7F0000000000 + i * 16)  # its own old address
        copies += one
    endb = blocks[-1][0]
    dest.write_bytes(data[:endb] + bytes(copies) + data[endb:])


def test_a_zstd_bomb_is_refused_by_its_ratio_and_leaves_no_temp_file(
    tmp_path: Path, temp_dir: Path
) -> None:
    """Found live: a 196 KB .blend decompressed to a 6 GiB temp file, still going at 120 s."""
    bomb = tmp_path / "bomb.blend"
    _zstd_bomb(bomb, gib=4)
    assert bomb.stat().st_size < 512 * 1024
    with pytest.raises(SpecError) as refused:
        trace_scene(bomb)
    text = str(refused.value)
    assert "bomb.blend" in text and "FARM_BLEND_MAX_RATIO" in text
    assert re.search(r"over [\d,]+:1", text) and "100:1" in text
    assert list(temp_dir.iterdir()) == []


def test_a_file_decompressing_past_the_cap_is_refused(tmp_path: Path, temp_dir: Path) -> None:
    caps = BlendCaps(max_decompressed_bytes=100_000)  # it holds 450 KB
    with pytest.raises(SpecError, match="FARM_BLEND_MAX_DECOMPRESSED_MB") as refused:
        trace_scene(SCENES / "textured.blend", Sources(caps=caps))
    assert "decompresses to too much" in str(refused.value)
    assert list(temp_dir.iterdir()) == []


def test_a_read_stopped_by_its_timeout_leaves_no_temp_file(tmp_path: Path, temp_dir: Path) -> None:
    """The reader is killed mid-decompression: its temp dir goes with it."""
    bomb = tmp_path / "bomb.blend"
    _zstd_bomb(bomb, gib=2)
    caps = BlendCaps(max_ratio=1e9, timeout_s=0.5)
    with pytest.raises(SpecError, match="FARM_BLEND_PARSE_TIMEOUT_S"):
        trace_scene(bomb, Sources(caps=caps))
    assert list(temp_dir.iterdir()) == []


def test_ten_thousand_linked_libraries_are_refused_before_any_is_read(tmp_path: Path) -> None:
    """Found live: 10,000 linked libraries took 17.5 GB of memory at submit."""
    scene = tmp_path / "many.blend"
    _with_libraries(SCENES / "textured.blend", scene, 10_000)
    with pytest.raises(SpecError, match="FARM_BLEND_MAX_LIBRARIES") as refused:
        trace_scene(scene)
    assert "links too many libraries (10,001, the cap is 2,000)" in str(refused.value)


def test_libraries_in_all_count_against_the_cap(tmp_path: Path) -> None:
    """The scene links one library, which links another: three files opened, two libraries."""
    deps = Path(__file__).parent / "blends" / "deps"
    with pytest.raises(SpecError, match="FARM_BLEND_MAX_LIBRARIES"):
        trace_scene(deps / "shot.blend", Sources(caps=BlendCaps(max_libraries=1)))
    assert trace_scene(deps / "shot.blend", Sources(caps=BlendCaps(max_libraries=2)))


@pytest.mark.parametrize(
    ("caps", "setting"),
    [
        (BlendCaps(max_file_bytes=1024), "FARM_BLEND_MAX_FILE_MB"),
        (BlendCaps(max_blocks=10), "FARM_BLEND_MAX_BLOCKS"),
    ],
    ids=["file-size", "blocks"],
)
def test_each_cap_names_itself_and_how_to_raise_it(caps: BlendCaps, setting: str) -> None:
    with pytest.raises(SpecError) as refused:
        read_and_trace(SCENES / "textured.blend", Sources(caps=caps))
    assert setting in str(refused.value) and "textured.blend" in str(refused.value)


def test_a_read_past_its_memory_cap_is_refused_naming_the_cap(tmp_path: Path) -> None:
    """Two million empty blocks: BAT keeps about 320 bytes for each, past a 32 MiB cap."""
    data = _raw(SCENES / "textured.blend")
    endb = _blocks(data)[-1][0]
    empty = b"".join(
        struct.pack("<4siQii", b"DATA", 0, 0x10000 + i, 0, 0) for i in range(2_000_000)
    )
    scene = tmp_path / "heavy.blend"
    scene.write_bytes(data[:endb] + empty + data[endb:])
    with pytest.raises(SpecError, match="FARM_BLEND_PARSE_MEMORY_MB") as refused:
        trace_scene(scene, Sources(caps=BlendCaps(memory_bytes=32 * _MIB)))
    assert "heavy.blend" in str(refused.value) and "32 MiB" in str(refused.value)


def test_a_block_of_negative_size_is_refused_not_looped_on(tmp_path: Path) -> None:
    data = bytearray(_raw(SCENES / "textured.blend"))
    start = _blocks(bytes(data))[3][0]
    struct.pack_into("<i", data, start + 4, -24)  # would seek back onto itself forever
    scene = tmp_path / "loop.blend"
    scene.write_bytes(bytes(data))
    with pytest.raises(SpecError, match="negative size"):
        trace_scene(scene)


def test_a_real_scene_reads_as_before_within_the_caps() -> None:
    info, traced = read_and_trace(SCENES / "textured.blend", Sources())
    assert info.camera == "ShotCam"
    assert [a.path for a in traced.manifest.assets] == ["lib/prop.blend", "tex/checker.png"]
