"""How the add-on talks to the farm, without Blender: `farm submit ... --json` run as the
preferences' user (the scene traced and uploaded by the CLI's own code), and GET /api/v1/jobs/{id}
with urllib (the standard library: Blender's Python has nothing else)."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HTTP_TIMEOUT_S = 20.0
FARM_TIMEOUT_S = 3 * 3600.0
"""`farm submit` uploads the scene's files and an estimate may run a probe job first: both can be
long, yet a `farm` that hangs must not hold Blender for ever."""
BUILT = Path(__file__).with_name("built.json")
"""Written into the zip by `farm addon --path`: {"farm": its command, "farm_version": ...}."""
PREFERENCES = "Edit > Preferences > Add-ons > Farm"


class FarmFailed(Exception):
    """`farm` or the farm's API refused or failed; the message says what to do."""


class Refused(FarmFailed):
    """The API answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    """Where the farm's API is and who is asking: the preferences, checked."""

    url: str
    token: str
    ca_file: str = ""

    @classmethod
    def checked(cls, url: str, token: str, ca_file: str) -> Access:
        url, token, ca_file = url.strip().rstrip("/"), token.strip(), ca_file.strip()
        if not url or not token:
            raise FarmFailed(
                f"set the farm's API URL and your token in the add-on's preferences "
                f"({PREFERENCES}); `farm user add NAME` on the farm makes a token"
            )
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise FarmFailed(
                f"the API URL {url} is not http:// or https://; fix it in {PREFERENCES}"
            )
        ca_file = os.path.expanduser(ca_file) if ca_file else ""
        if ca_file and not os.path.isfile(ca_file):
            raise FarmFailed(
                f"CA file {ca_file}: no such file; fix it in {PREFERENCES} or clear it"
            )
        return cls(url=url, token=token, ca_file=ca_file)


def built_with() -> dict[str, str]:
    """The `farm` command and version that built this add-on's zip ({} when run from a copy of
    the source)."""
    try:
        data = json.loads(BUILT.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def find_farm(chosen: str) -> str:
    """The preferences' `farm` (`chosen`), else the `farm` that built this zip (the add-on's own
    release) while it is still there, else the one on PATH."""
    if chosen.strip():
        return os.path.expanduser(chosen.strip())
    built = built_with().get("farm", "")
    if built and os.access(built, os.X_OK):
        return built
    found = shutil.which("farm")
    if found:
        return found
    raise FarmFailed(
        "no `farm` command found: install farm (`pip install farm`) or set its path in the "
        f"add-on's preferences ({PREFERENCES})"
    )


def farm_env(access: Access, config: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` less any FARM_* setting and Blender's own Python paths (`farm` runs its own
    Python), plus `access`: the token goes in the environment, which only its user can read,
    never on the command line, which every user can."""
    env = {
        k: v
        for k, v in environ.items()
        if not k.startswith("FARM_") and k not in ("PYTHONHOME", "PYTHONPATH")
    }
    env.update({"FARM_CONFIG": str(config), "FARM_API_URL": access.url})
    env["FARM_API_TOKEN"] = access.token
    if access.ca_file:
        env["FARM_CA_FILE"] = access.ca_file
    return env


def farm_said(stderr: str, returncode: int) -> str:
    """The error `farm` printed (its `farm: error:` lines), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [
        line.removeprefix("farm: error: ") for line in lines if line.startswith("farm: error:")
    ]
    if errors:
        return " ".join(errors)
    return lines[-1] if lines else f"`farm submit` exited with status {returncode}"


def run_submit(farm: str, access: Access, blend: str, *flags: str) -> dict[str, Any]:
    """`farm submit BLEND FLAGS --json` as `access`'s user; its JSON answer. The config `farm`
    reads is an empty one of its own, so no farm config on this machine (another farm's, or one
    holding a farm's secrets) takes part."""
    with tempfile.TemporaryDirectory(prefix="farm_blender-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text("{}\n", encoding="utf-8")
        try:
            done = subprocess.run(
                [farm, "submit", blend, *flags, "--json"],
                env=farm_env(access, config, os.environ),
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=FARM_TIMEOUT_S,
            )
        except OSError as exc:
            raise FarmFailed(
                f"cannot run {farm}: {exc.strerror or exc}; set the farm command in {PREFERENCES}"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise FarmFailed(
                f"`farm submit` gave no answer in {FARM_TIMEOUT_S / 3600:.0f} h and was stopped"
            ) from exc
    if done.returncode != 0:
        raise FarmFailed(farm_said(done.stderr, done.returncode))
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError) as exc:
        raise FarmFailed(f"`farm submit --json` printed no JSON: {done.stdout[-200:]!r}") from exc
    if not isinstance(answer, dict):
        raise FarmFailed(f"`farm submit --json` printed {type(answer).__name__}, not an object")
    return answer


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The token goes to the API URL the preferences name and nowhere it may redirect to."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def fetch_job(access: Access, job_id: str) -> dict[str, Any]:
    """GET {url}/api/v1/jobs/{job_id}: the job's summary, as `farm status --json` prints it.
    Runs on a thread: it touches nothing of Blender's."""
    request = urllib.request.Request(
        f"{access.url}/api/v1/jobs/{urllib.parse.quote(job_id, safe='')}",
        headers={
            "Authorization": f"Bearer {access.token}",
            "Accept": "application/json",
            "X-Farm-Client": built_with().get("farm_version", "0.1.0"),
        },
    )
    context = ssl.create_default_context(cafile=access.ca_file or None)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirect)
    try:
        with opener.open(request, timeout=HTTP_TIMEOUT_S) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise Refused(exc.code, _api_said(exc)) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FarmFailed(f"the farm's API at {access.url} does not answer ({reason})") from exc
    except ValueError as exc:
        raise FarmFailed(f"the farm's API at {access.url} answered something not JSON") from exc
    if not isinstance(answer, dict):
        raise FarmFailed(f"the farm's API answered {type(answer).__name__}, not a job")
    return answer


def _api_said(exc: urllib.error.HTTPError) -> str:
    """The API's own message ({"error": ...}) or the status line."""
    try:
        said = json.loads(exc.read()).get("error", "")
    except (OSError, ValueError, AttributeError):
        said = ""
    return f"the farm's API answered {exc.code}: {said or exc.reason}"
