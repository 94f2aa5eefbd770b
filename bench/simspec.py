"""What the scale simulation takes and gives: the workload, the fleet and the outcome of a run."""

from __future__ import annotations

from dataclasses import dataclass

from farm.adapters.settings import Settings
from farm.core.cost import load_prices

_G5 = load_prices().price("us-east-1", "g5.xlarge")


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    frames: int
    startup_s: float
    """Blender start-up and scene load, paid by every render attempt."""
    frame_s: float
    frame_cv: float = 0.25
    encode_startup_s: float = 1.0
    encode_frame_s: float = 0.05
    stitch_s: float = 30.0
    task_latency_s: float = 0.05
    """Queue and ledger time per task."""
    crash_p: float = 0.0
    """Chance a render attempt crashes (a PermanentError: spends a failure, backoff, retry)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    gpus: int
    interruption_per_h: float = 0.0
    boot_s: float = 120.0
    lease_s: float = Settings().lease_s
    reconcile_s: float = Settings().reconcile_interval_s
    max_attempts: int = Settings().max_attempts
    max_lost_leases: int = Settings().max_lost_leases
    spot_price_h: float = _G5.spot_h
    """g5.xlarge (A10G), us-east-1, from the farm's price table (farm/core/prices.json)."""
    on_demand_price_h: float = _G5.on_demand_h
    warm_blender: bool = True
    """Workers keep Blender with the job's scene open between its chunks (workers.host.warm): only an
    instance's first chunk of the job, or its first after a crash, pays the start-up S."""
    encode_alongside: bool = True
    """Workers encode a rendered chunk's segment beside their next render (workers.host.alongside; on
    where the encoder is NVENC, as on the A10G), one at a time: a render that ends while the
    last encode runs waits for it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Breakdown:
    """Where the makespan beyond the ideal went, in seconds, counted from when the fleet is up:
    GPU-seconds of each kind from then to the last render, over the GPUs, then what follows it.
    The parts add up to makespan - fleet up - ideal."""

    startup_s: float = 0.0
    """Blender start-up (and queue latency) of every render attempt, splits' new chunks included."""
    encode_s: float = 0.0
    """Segment encodes on render GPUs before the last render ends."""
    lost_s: float = 0.0
    """Frames in flight at a reclaim or a crash, rendered again."""
    replacement_boot_s: float = 0.0
    """A reclaimed instance's replacement booting."""
    probe_idle_s: float = 0.0
    """GPUs idle while an `auto` job's plan is pending (the probe wave)."""
    draw_s: float = 0.0
    """The frames' drawn times above (or below) frames x F."""
    idle_s: float = 0.0
    """GPUs idle otherwise before the last render: the tail, and boot spread not evened out."""
    after_last_render_s: float = 0.0
    """The last encode and the stitch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    policy: str
    chunk_size: int
    chunks: int
    makespan_s: float
    ideal_s: float
    gpu_hours: float
    lost_h: float
    """Rendering thrown away: frames in flight at a reclaim or a crash, encodes cut short."""
    startup_h: float
    """Blender start-ups plus instance boots."""
    interruptions: int
    failed: str = ""
    most_lost_leases: int = 0
    """The most times one chunk lost its worker (the job fails at max_lost_leases)."""
    fleet_up_s: float = 0.0
    """When the first fleet was up: the mean time its instances became ready (boot is the
    cloud's; Blender start-up and everything after it is the farm's)."""
    splits: int = 0
    """Running chunks split by idle workers (farm.core.split)."""
    breakdown: Breakdown = Breakdown()

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.ideal_s

    @property
    def ratio_up(self) -> float:
        """Makespan from when the fleet was up, over the ideal (the issue's target)."""
        return (self.makespan_s - self.fleet_up_s) / self.ideal_s
