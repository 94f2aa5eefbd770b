"""`python -m bench [overhead|saves|dispatch|stitch|store|ledger|simulate|containers ...] [--quick]`: run the benchmarks,
each beside its baseline, write one JSON file under bench/results/ and print the table.
`--rounds N --frames 48,96`: the overhead bench N times over, medians printed.
`python -m bench soak [--minutes 20] [--seed N] [--faults kill,stop,...]`: the soak under faults
(bench/soak.py), only when named; it exits 1 unless no frame was lost or duplicated and no job
was wrongly marked done.
`python -m bench api [--quick]`: submit through the API against direct submit, and the API's
requests per second for a job's status (bench/api.py), only when named.
`python -m bench tiles [--quick]`: a 4K still in 4 tiles on 2 workers against one worker
rendering it whole (bench/tiles.py), only when named.
`python -m bench quality [--quick]`: scoring a segment against its encode, and a chunked encode
against one encode at equal bitrate (bench/quality.py), only when named.
`python -m bench ladder [--quick]`: a ladder's segments from one decode against the same rungs
made as separate jobs, each decoding again (bench/ladder.py), only when named.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common
from bench.common import LocalFarm, Row

ALL = ("overhead", "saves", "dispatch", "stitch", "store", "ledger", "simulate", "containers")
NAMED_ONLY = ("soak", "api", "tiles", "quality", "ladder")
"""Run only when named: never by `python -m bench` (all) nor `make bench`."""
NEEDS_FARM = {"overhead", "dispatch", "store"}


def run(
    names: list[str],
    quick: bool,
    out_dir: Path,
    work: Path | None = None,
    *,
    rounds: int = 1,
    frame_counts: list[int] | None = None,
    soak_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the named benchmarks; returns what was written to the results file. `rounds` and
    `frame_counts`: the overhead bench's (bench.overhead.run); `soak_args`: bench.soak.run's."""
    from bench import containers, dispatch, ledger, overhead, saves, simulate, stitch, store

    results: dict[str, Any] = {"machine": common.machine(), "quick": quick, "started": time.time()}
    rows: list[Row] = []
    farm: LocalFarm | None = None
    try:
        if NEEDS_FARM & set(names):
            farm = common.start_farm(workers=os.cpu_count() or 1, threads=1, base=work)
        runners: dict[str, Callable[[], tuple[dict[str, Any], list[Row]]]] = {
            "overhead": lambda: overhead.run(
                _need(farm), quick, rounds=rounds, frame_counts=frame_counts
            ),
            "saves": lambda: saves.run(quick),
            "dispatch": lambda: dispatch.run(_need(farm), quick),
            "stitch": lambda: stitch.run(quick),
            "store": lambda: store.run(_need(farm), quick),
            "ledger": lambda: ledger.run(quick),
            "simulate": lambda: simulate.run(quick),
            "containers": lambda: containers.run(quick),
            "soak": lambda: _soak(quick, work, soak_args or {}),
            "api": lambda: _api(quick, work),
            "tiles": lambda: _tiles(quick),
            "quality": lambda: _quality(quick),
            "ladder": lambda: _ladder(quick),
        }
        for name in names:
            started = time.monotonic()
            results[name], new_rows = runners[name]()
            results[name]["bench_s"] = round(time.monotonic() - started, 1)
            # Other work on the machine skews timings: keep the load beside them.
            results[name]["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
            rows += new_rows
    finally:
        if farm is not None:
            farm.close()
    results["rows"] = [_row(r) for r in rows]
    results["finished"] = time.time()
    path = out_dir / time.strftime("bench-%Y%m%d-%H%M%S.json")
    common.dump(path, results)
    results["path"] = str(path)
    return results


def _soak(quick: bool, work: Path | None, args: dict[str, Any]) -> tuple[dict[str, Any], list[Row]]:
    from bench import soak  # it drives the tests' farm and fault proxies: imported when named

    return soak.run(quick, work=work, **args)


def _api(quick: bool, work: Path | None) -> tuple[dict[str, Any], list[Row]]:
    from bench import api  # it starts a farm of its own, with no workers: imported when named

    return api.run(quick, work)


def _tiles(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    from bench import tiles  # Blender renders of a 4K still: minutes, run when named

    return tiles.run(quick)


def _quality(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    from bench import quality  # 1080p x264 encodes and scores: minutes, run when named

    return quality.run(quick)


def _ladder(quick: bool) -> tuple[dict[str, Any], list[Row]]:
    from bench import ladder  # x264 encodes of every rung, twice: minutes, run when named

    return ladder.run(quick)


def _need(farm: LocalFarm | None) -> LocalFarm:
    assert farm is not None
    return farm


def _row(row: Row) -> dict[str, Any]:
    return {k: getattr(row, k) for k in ("bench", "case", "farm", "baseline", "ratio", "note")}


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table, readable in a terminal and pasteable into the README."""
    lines = [
        "| bench | case | farm | baseline | ratio | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else ""
        cells = [r["bench"], r["case"], r["farm"], r["baseline"], ratio, r["note"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names", nargs="*", help=f"any of {', '.join(ALL + NAMED_ONLY)}; default: all but soak"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds, not minutes)")
    parser.add_argument("--out", type=Path, default=common.ROOT / "bench" / "results")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="overhead: repeat each frame count's (direct, farm) this many times; medians",
    )
    parser.add_argument(
        "--frames",
        type=lambda text: [int(n) for n in text.split(",")],
        default=None,
        help="overhead: these frame counts only, e.g. 48,96 (default 48,96,192)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="soak: minutes of faults (default 20; with --quick 3)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="soak: the fault schedule's seed (default: drawn, and printed)",
    )
    parser.add_argument(
        "--faults",
        default="",
        help="soak: exactly these faults, e.g. kill,stop,store,redis (default: drawn)",
    )
    parser.add_argument(
        "--rebuild-chunks",
        type=int,
        default=1000,
        help="soak: chunks in the store the ledger rebuild is timed on",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(ALL + NAMED_ONLY))
    if unknown:
        parser.error(
            f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(ALL + NAMED_ONLY)}"
        )
    faults = tuple(f for f in args.faults.split(",") if f)
    from bench.soakplan import KINDS

    if set(faults) - set(KINDS):
        parser.error(f"--faults {args.faults}: name faults from {', '.join(KINDS)}")
    if args.minutes is not None and args.minutes <= 0:
        parser.error("--minutes must be more than 0")
    if args.rebuild_chunks < 1:
        parser.error("--rebuild-chunks must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    results = run(
        list(args.names) or list(ALL),
        args.quick,
        args.out,
        rounds=args.rounds,
        frame_counts=args.frames,
        soak_args={
            "minutes": args.minutes,
            "seed": args.seed,
            "faults": faults,
            "rebuild_chunks": args.rebuild_chunks,
        },
    )
    m = results["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['blender']}")
    loads = [results[n]["load_avg_1m_after"] for n in ALL + NAMED_ONLY if n in results]
    print(f"load average (1 min) at start {m['load_avg_at_start'][0]}, after each: {loads}")
    print(table(results["rows"]))
    for name in ALL + NAMED_ONLY:
        extra = results.get(name, {}).get("table")
        if extra:
            print(f"\n{name}:\n{extra}")
    print(f"\nresults: {results['path']}")
    if results.get("soak", {}).get("ok") is False:
        kept = results["soak"].get("kept")
        sys.exit(
            f"soak: frames lost, duplicated or jobs wrongly marked done; the farm is kept in {kept}"
        )


if __name__ == "__main__":
    main()
