"""Where a simulated job's time went (bench/sim.py): the GPU-seconds of each kind of work from when
the fleet is up to the last render, per GPU, beside the ideal; then the last encode and the stitch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.simspec import Breakdown


@dataclass(slots=True)
class Book:
    """GPU-seconds as the simulation spends them, kept as it runs."""

    startup_s: float = 0.0
    frames_s: float = 0.0
    lost_s: float = 0.0
    encodes: list[tuple[float, float]] = field(default_factory=list)
    planning_idle_s: float = 0.0
    idle_since: dict[int, tuple[float, bool]] = field(default_factory=dict)
    """Instance -> (when it went idle, whether the plan was pending then)."""
    last_render: float = 0.0

    def render(self, elapsed_s: float, startup_s: float, frames_s: float) -> None:
        """A render attempt that ran `elapsed_s`: its start-up, the frames it saved, the rest
        (a frame cut short by a reclaim or a crash) lost."""
        startup = min(elapsed_s, startup_s)
        self.startup_s += startup
        self.frames_s += frames_s
        self.lost_s += max(elapsed_s - startup - frames_s, 0.0)

    def idle(self, who: int, now: float, planning: bool) -> None:
        self.idle_since.setdefault(who, (now, planning))

    def busy(self, who: int, now: float, planning: bool) -> None:
        """`who` takes work (or goes away): a wait while the plan was pending is the probe's."""
        since = self.idle_since.pop(who, None)
        if since is not None and since[1]:
            self.planning_idle_s += now - since[0]

    def breakdown(
        self,
        *,
        gpus: int,
        fleet_up_s: float,
        ideal_s: float,
        frames_ideal_s: float,
        replacement_boot_s: float,
        end_s: float,
    ) -> Breakdown:
        """Seconds of makespan (GPU-seconds over the GPUs) from when the fleet is up."""
        last = self.last_render
        encode = sum(max(min(b, last) - a, 0.0) for a, b in self.encodes)
        window = last - fleet_up_s
        parts = {
            "startup_s": self.startup_s / gpus,
            "encode_s": encode / gpus,
            "lost_s": self.lost_s / gpus,
            "replacement_boot_s": replacement_boot_s / gpus,
            "probe_idle_s": self.planning_idle_s / gpus,
            "draw_s": (self.frames_s - frames_ideal_s) / gpus,
        }
        idle = window - ideal_s - sum(parts.values())
        return Breakdown(**parts, idle_s=idle, after_last_render_s=end_s - last)
