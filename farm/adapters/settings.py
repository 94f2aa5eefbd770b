"""One settings object for every farm command and worker: CLI flags over FARM_* env over the file.

`farm up` writes the file; FARM_CONFIG names another one. Nothing reads the environment at import:
`load_settings` reads it when an entry point asks. pydantic-settings validates every value (a
negative lease is refused with the setting's name).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from farm.adapters.private import write_private
from farm.adapters.tls import verified_redis_url
from farm.core.errors import ConfigError

if TYPE_CHECKING:
    import click

ENV_PREFIX = "FARM_"
_SOURCES: ContextVar[tuple[Mapping[str, str], Path | None]] = ContextVar(
    "farm_settings_sources", default=({}, None)
)
"""The environment and config file `load_settings` reads; a bare Settings(...) reads neither."""


class _Environment(PydanticBaseSettingsSource):
    """FARM_* variables from a mapping (os.environ, or a test's own), validated by pydantic."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.env = env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raw = self.env.get(ENV_PREFIX + field_name.upper())
        return (raw if raw != "" else None), field_name, False

    def __call__(self) -> dict[str, Any]:
        values = {}
        for name, field in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(field, name)
            if value is not None:
                values[key] = value
        return values


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", validate_default=True)

    redis_url: str = ""
    """redis://:PASSWORD@HOST:PORT/0 — broker, result backend and ledger."""
    s3_endpoint: str = ""
    """Empty for AWS S3; http://127.0.0.1:PORT for the local SeaweedFS."""
    s3_region: str = "us-east-1"
    """The store's region (and CloudWatch's for `farm metrics publish`)."""
    s3_bucket: str = "farm"
    """The bucket that holds scenes, frames, segments, manifests and outputs."""
    s3_access_key: str = ""
    """Empty: the default AWS credential chain (instance role)."""
    s3_secret_key: str = ""
    """The secret of s3_access_key; empty with it."""
    s3_read_timeout_s: float = Field(60.0, gt=0)
    """How long the store's client waits for the next bytes of an answer before it gives up on
    the request and sends it again (botocore's read_timeout); the fault tests shorten it."""
    weed_jwt_key: str = ""
    """Signs SeaweedFS's filer and volume requests in docker-compose.yml's store (`farm
    store-security` writes it into the store's security.toml): 32 or more random characters."""
    flower_url: str = ""
    """Flower's address, which `farm up` prints and the CLI's live views link to."""
    flower_user: str = ""
    """The user Flower and the job pages ask for (basic auth)."""
    flower_password: str = ""
    """That user's password."""
    store_identities: str = ""
    """Each role's store keys, `ROLE=ACCESS_KEY:SECRET_KEY` comma-separated (admin, control,
    worker, cli: farm.core.roles): what `farm store-security` writes into SeaweedFS's S3
    identities in docker-compose.yml, each role with only its actions."""
    web_url: str = ""
    """The job pages and Prometheus /metrics (`farm web`), behind the Flower credentials."""
    api_url: str = ""
    """The farm's API, `farm web`'s address (https://farm.example:8443): with api_token set, the
    CLI talks to it alone (farm.cli.remote) and needs no Redis password and no store key. `farm
    login` writes it."""
    api_token: str = Field("", repr=False)
    """Your token for api_url (`farm user add` makes it, `farm login` keeps it in a 0600 config
    file): a secret, so never printed, logged, or put in a URL."""
    notify_url: str = ""
    """Farm-wide webhook: every job's events are POSTed here (as well as to `submit --notify`)."""
    webhook_secret: str = ""
    """Shared secret for the webhooks' X-Farm-Signature (HMAC-SHA256 of the body)."""
    webhook_allow: str = ""
    """Address ranges (CIDR, comma-separated) webhooks may reach though not public: loopback,
    private, link-local and metadata addresses are refused otherwise (farm.control.webhooks)."""
    lease_s: float = Field(30.0, gt=0)
    """A chunk whose lease is not renewed for this long is taken back by the reconciler."""
    reconcile_interval_s: float = Field(5.0, gt=0)
    """How often the reconciler looks for expired leases, lost messages and jobs to stitch."""
    max_attempts: int = Field(3, ge=1)
    """Failures a chunk may spend before the job fails; interruptions do not count."""
    max_lost_leases: int = Field(6, ge=1)
    """Times a chunk's worker may vanish mid-chunk (lease expired) before the job fails."""
    spot_interruption_per_h: float = Field(0.05, ge=0)
    """Expected spot reclaims per instance-hour (0.05: 5%/h); `--chunk-size auto` sizes for it."""
    warm_blender_s: float = Field(30.0, ge=0)
    """How long a worker keeps its Blender, with a job's scene open, after a chunk for that job's
    next chunk (workers.host.warm); 0: a new Blender for every chunk."""
    ready_blender: bool = True
    """An idle render worker keeps a Blender started ahead of any job (its start-up done, no
    scene open) for the next job's first chunk here (workers.host.warm); about 250 MB of memory."""
    encode_alongside: Literal["auto", "on", "off"] = "auto"
    """Encode a rendered chunk's segment beside the next render on this worker (workers.host.alongside)
    instead of before it: `auto` where the encoder is NVENC, which leaves the GPU's render engine
    free; a CPU encode would take the cores the render uses."""
    worker_include: str = ""
    """Modules of Celery tasks a worker imports beside its own, comma-separated (Celery's
    `include`; each registers its tasks as it is imported): the benchmarks' bench.tasks."""
    early_upload_keep_h: float = Field(24.0, ge=0)
    """How long a failed or cancelled job keeps the upload its segments were copied into before
    the stitch, for a retry to finish; then the reconciler aborts it (its parts are billed)."""
    render_memory_limit_mb: int = Field(0, ge=0)
    """Address-space cap for CPU Blender renders (0: none), so a runaway scene fails alone."""
    file_output_frame_max_bytes: int = Field(2 * 1024**3, ge=1)
    """What a scene's File Output nodes may write for one frame (all its files together): over
    it, the chunk fails for good, naming this setting."""
    file_output_job_max_bytes: int = Field(200 * 1024**3, ge=1)
    """What a job's File Output nodes may write over all its frames, as recorded: over it, the
    chunk that would pass it fails for good, naming this setting."""
    log_max_bytes: int = Field(16 * 1024**2, ge=4096)
    """The most of a chunk's Blender or ffmpeg log kept in the store: its head and its tail, the
    middle cut out with a marker that says how much."""
    imds_url: str = "http://169.254.169.254"
    """The instance metadata service the spot watcher polls (IMDSv2); empty, or `off` where an
    empty variable cannot be set (compose), for a host with none: no spot watcher runs."""
    shutdown_grace_s: float = Field(100.0, ge=0)
    """On SIGTERM a worker keeps rendering only the frames that fit in this many seconds, then
    hands the rest of its chunk back (keep it under the container's stop timeout)."""
    scratch_dir: str = ""
    """Where workers keep scenes and frames while they work; empty: the system temp dir."""
    disk_sweep_s: float = Field(60.0, gt=0)
    """How often a worker removes the folders of ended jobs from its scratch dir and trims its
    scene cache (workers.janitor)."""
    asset_cache_mb: int = Field(20 * 1024, ge=0)
    """Cap on each host's cache of scene files (textures, libraries) kept by hash, and apart from
    it on its cache of the scenes themselves; least recently used files go first (workers.phases.scene_tree,
    workers.janitor)."""
    asset_allow_paths: str = ""
    """Folders, `:`-separated as in PATH, that a scene's files may be uploaded from besides its
    own folder tree (as `submit --allow-path DIR`): a studio's shared texture library."""
    blend_max_file_mb: int = Field(8 * 1024, ge=1)
    """Cap on the size of each .blend file read at submit (the scene and its libraries)."""
    blend_max_decompressed_mb: int = Field(16 * 1024, ge=1)
    """Cap on what one compressed .blend file decompresses to at submit."""
    blend_max_ratio: float = Field(100.0, ge=1)
    """Cap on a compressed .blend file's compression ratio at submit (real scenes: 3-10)."""
    blend_max_libraries: int = Field(2_000, ge=0)
    """Cap on the linked libraries a scene reads at submit, in one file and in all."""
    blend_max_blocks: int = Field(4_000_000, ge=1)
    """Cap on the blocks in each .blend file read at submit."""
    blend_parse_memory_mb: int = Field(4 * 1024, ge=64)
    """Memory the reading of a scene at submit may take (an address-space cap on its process)."""
    blend_parse_timeout_s: float = Field(120.0, gt=0)
    """Time the reading of a scene at submit may take."""
    blender: str = "bpy"
    """`bpy`: Blender 4.5 LTS as the PyPI wheel, run as a child Python (the local farm and the
    worker image); else the path of a Blender binary of the same release."""
    ffmpeg: str = "ffmpeg"
    """The ffmpeg binary the encode and the stitch run."""
    ffprobe: str = "ffprobe"
    """The ffprobe binary that checks masters, segments and the delivered video."""
    vmaf_ffmpeg: str = "imageio-ffmpeg"
    """The ffmpeg that scores VMAF (`--score vmaf`, `--target-quality vmaf=95`), built with
    libvmaf: `imageio-ffmpeg` (the PyPI package's static build, a dependency; farm.adapters.vmaf),
    another binary's path, or empty (`off` where an empty variable cannot be set): no VMAF."""
    sandbox: Literal["bwrap", "off"] = "bwrap"
    """How a scene's Blender and every ffmpeg/ffprobe that reads a master, frames or segments are
    boxed: `bwrap` (bubblewrap, required on every worker) or `off` (no box: only for hosts
    without bwrap that take scenes and masters you trust; ffmpeg keeps its whitelists)."""
    ca_file: str = ""
    """CA bundle every https connection is verified against: boto3 to an https S3 endpoint,
    ffmpeg/ffprobe reading presigned URLs, the CLI to Flower and `farm web` (`farm up --tls`
    sets it to the farm's own CA). Empty: the system's CAs (boto3's own bundle for S3)."""
    tls_cert_file: str = ""
    """Certificate Flower and `farm web` serve https with (empty: plain http on loopback)."""
    tls_key_file: str = ""
    """The private key of tls_cert_file."""
    max_chunks: int = Field(10_000, ge=1)
    """Cap on chunks per job: each chunk costs the ledger about 1.5 KB of Redis."""
    data_dir: str = ""
    """The local farm's data directory (`farm up --data`)."""
    region: str = "us-east-1"
    """Where the farm's GPUs run, for prices (the table in farm/core/prices.json is per region)."""
    price_file: str = ""
    """A price table to use instead of the one shipped (farm/core/prices.json, same layout)."""
    local_instance_type: str = "g5.xlarge"
    """A local farm's work is priced as this instance type on demand would cost."""
    max_cost: float = Field(0.0, ge=0)
    """Default budget per job in dollars (0: none); `submit --max-cost` overrides it."""

    @field_validator("redis_url")
    @classmethod
    def _verified_tls(cls, url: str) -> str:
        return verified_redis_url(url)

    @field_validator("imds_url", "vmaf_ffmpeg")
    @classmethod
    def _off_is_empty(cls, url: str) -> str:
        return "" if url.strip().lower() == "off" else url

    @field_validator("s3_endpoint", "flower_url", "web_url", "notify_url", "api_url")
    @classmethod
    def _web_url(cls, url: str) -> str:
        scheme = urlsplit(url).scheme
        if url and scheme not in ("http", "https"):  # the value itself may hold a secret
            raise ValueError(f"not an http:// or https:// URL (it starts {scheme or 'with no'}:)")
        return url

    @model_validator(mode="after")
    def _tls_files(self) -> Settings:
        if self.ca_file and not Path(self.ca_file).is_file():
            raise ValueError(
                f"FARM_CA_FILE {self.ca_file}: no such file, so https servers cannot be "
                "verified; name the CA that signed their certificates, or leave it empty for "
                "the system's"
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together: set both or neither")
        for path in (self.tls_cert_file, self.tls_key_file):
            if path and not Path(path).is_file():
                raise ValueError(f"{path}: no such file (tls_cert_file/tls_key_file)")
        return self

    @property
    def lease_renew_s(self) -> float:
        """Renew three times per lease so one missed beat never loses the chunk."""
        return max(self.lease_s / 3.0, 0.5)

    @property
    def recovery_bound_s(self) -> float:
        """Worst case from a worker's death to its chunk being queued again."""
        return self.lease_s + self.reconcile_interval_s

    def require_farm(self) -> Settings:
        if not self.redis_url:
            raise ConfigError(
                "no farm configured: run `farm up` for a local farm, or set FARM_REDIS_URL and "
                "FARM_S3_* to point at a remote one"
            )
        return self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes`, validated like any other source."""
        return Settings(**{**self.model_dump(), **changes})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init arguments) over FARM_* variables over the config file over defaults."""
        env, path = _SOURCES.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, _Environment(settings_cls, env)]
        if path is not None and path.exists():
            sources.append(JsonConfigSettingsSource(settings_cls, json_file=path))
        return tuple(sources)


LOCAL_CONFIG = Path(".farm") / "config.json"
"""Where `make demo` leaves its farm's config: found in the current folder, as git finds .git."""


def default_config_path(env: Mapping[str, str], cwd: Path | None = None) -> Path:
    """$FARM_CONFIG; else ./.farm/config.json where the current folder has one (never a parent's:
    a folder up the tree may be another user's); else ~/.config/farm/config.json."""
    if env.get("FARM_CONFIG"):
        return Path(env["FARM_CONFIG"]).expanduser()
    here = (cwd or Path.cwd()) / LOCAL_CONFIG
    if here.is_file():
        return here
    return user_config_path(env)


def user_config_path(env: Mapping[str, str]) -> Path:
    """The user's own config, ~/.config/farm/config.json (under $XDG_CONFIG_HOME where set):
    where `farm login` writes a client's."""
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "farm" / "config.json"


def config_paths(env: Mapping[str, str], cwd: Path | None = None) -> tuple[Path, ...]:
    """Every file farm may read its config from here, whichever it reads: none of them is
    ever uploaded as a scene's file (farm.blender.assets)."""
    found = [(cwd or Path.cwd()) / LOCAL_CONFIG, user_config_path(env)]
    if env.get("FARM_CONFIG"):
        found.insert(0, Path(env["FARM_CONFIG"]).expanduser())
    return tuple(found)


@contextmanager
def _reading(env: Mapping[str, str], path: Path | None) -> Iterator[None]:
    token = _SOURCES.set((env, path))
    try:
        yield
    finally:
        _SOURCES.reset(token)


def load_settings(
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    config_path: Path | None = None,
) -> Settings:
    """Defaults, then the config file, then FARM_* variables, then explicit overrides (flags)."""
    env = os.environ if env is None else env
    path = config_path or default_config_path(env)
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read farm config ({exc}); fix or delete it") from exc
        if not isinstance(data, dict):
            raise ConfigError(
                f'{path}: a farm config is a JSON object of settings, {{"name": value}}, '
                f"not {type(data).__name__ if data is not None else 'null'}; fix or delete it"
            )
    flags: dict[str, Any] = {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        with _reading(env, path):
            return Settings(**flags)
    except ValidationError as exc:
        problems = "; ".join(
            f"{ENV_PREFIX}{'.'.join(map(str, e['loc'])).upper()} ({e['loc'][0]}): {e['msg']}"
            if e["loc"]
            else e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise ConfigError(
            f"bad farm setting: {problems}. Fix it in the environment, the flags or {path}"
        ) from None


def command_settings(ctx: click.Context) -> Settings:
    """A `farm` command's settings: load_settings with the --config file the root group keeps in
    ctx.meta (farm.cli.main)."""
    return load_settings(config_path=ctx.meta.get("config_path"))


def save_settings(settings: Settings, path: Path) -> None:
    """Write the config file readable by its owner only: it holds the farm's passwords."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, json.dumps(settings.to_json(), indent=2) + "\n")
