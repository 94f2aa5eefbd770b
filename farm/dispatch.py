"""The Celery side of the farm: app settings for long tasks, and sending tasks by name, each to
its job's project's queues (farm.core.queues: fair share is kombu's round robin between them).

farm never imports workers; it knows the task names and queues from farm.core.pipeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from farm.adapters.settings import Settings
from farm.core import queues
from farm.core.errors import ConfigError, FarmError, UnreachableError
from farm.core.pipeline import STITCH, TASK_QUEUES, Phase, Queue, spec_of
from farm.ledger import Ledger

PRIORITY_STEPS = list(range(10))
"""kombu's Redis transport keeps one list per step and pops the lowest step first (0 is the most
urgent). Ten steps, so every farm priority band has its own list; the separator stays kombu's
default, which Ledger.queue_length and the autoscaling metrics count on."""
DEFAULT_PRIORITY = 50


def broker_priority(priority: int) -> int:
    """A farm priority (0..100, higher first, as in Deadline and Flamenco) as kombu's Redis
    priority (0..9, lower first): 100 -> 0, 50 -> 5, 0 -> 9."""
    return 9 - min(max(priority, 0), 100) * 9 // 100


log = logging.getLogger(__name__)

VISIBILITY_TIMEOUT_S = 12 * 3600
"""Longer than any chunk may run: Redis redelivers unacked messages after this long. The ledger's
leases, not this timeout, are what bring a lost chunk back quickly."""
BROKER_SOCKET_TIMEOUT_S = 10.0
"""How long a broker command waits for Redis's reply, as the ledger does. A worker cut off the
network comes back with its broker connections half open: with no timeout, its Celery loop blocks
for good on the first publish over one. With it, and one retry on a new connection after a
timeout (`retry_on_timeout`), the late ack of the attempt that lost its lease goes through too:
an ack that fails keeps the message counted against the prefetch of 1, and the worker never takes
a chunk again. A publish sent twice is harmless: the ledger's claim decides, not the message."""


def make_app(settings: Settings, name: str = "farm") -> Celery:
    settings.require_farm()
    app = Celery(name, broker=settings.redis_url, backend=settings.redis_url)
    transport: dict[str, Any] = {
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "priority_steps": PRIORITY_STEPS,
        "socket_timeout": BROKER_SOCKET_TIMEOUT_S,
        "retry_on_timeout": True,
        # kombu's default, named because fair share between projects is built on it: the queue
        # a worker just took from goes to the end of its BRPOP (farm.core.queues).
        "queue_order_strategy": "round_robin",
    }
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # The ledger is the record of every chunk, and Flower hears each task's result in its
        # events: a result kept in Redis for a week per chunk was read by no one.
        task_ignore_result=True,
        result_expires=7 * 24 * 3600,
        task_send_sent_event=True,
        worker_send_task_events=True,
        task_routes={name: {"queue": str(queue)} for name, queue in TASK_QUEUES.items()},
        task_default_queue=str(Queue.RENDER),
        # A message sent without a priority (a plugin's task) sits in the middle, not at the top.
        task_default_priority=broker_priority(DEFAULT_PRIORITY),
        worker_hijack_root_logger=False,
        worker_max_tasks_per_child=50,
    )
    return app


Route = tuple[str, int]
"""A job's (project, weight): ('', 1) for a job of no project."""
ROUTE_TTL_S = 5.0
"""How long a Dispatcher trusts a job's route: a job's project never changes, its weight may
(`farm project set`), and a burst of sends (a submit's thousand chunks) reads it once."""


class Dispatcher:
    """Sends chunk and stitch tasks by name; used by the CLI, the reconciler and workers."""

    def __init__(
        self,
        app: Celery,
        priority_of: Callable[[str], int] | None = None,
        route_of: Callable[[str], Route] | None = None,
    ) -> None:
        """`priority_of(job_id)`: the job's farm priority; `route_of(job_id)`: its project and
        that project's weight. By default both are read from the ledger on the app's broker,
        so every message of a job, re-sent ones included (requeues, splits, retries, stitches),
        carries its priority and lands in its project's queues."""
        self.app = app
        self._priority_of = priority_of
        self._route_of = route_of
        self._routes: dict[str, tuple[float, Route]] = {}
        self._lock = threading.Lock()

    def _ledger(self) -> Ledger:
        return Ledger.from_url(str(self.app.conf.broker_url))

    def priority_of(self, job_id: str) -> int:
        if self._priority_of is None:
            self._priority_of = self._ledger().priority
        try:
            return self._priority_of(job_id)
        except FarmError as exc:  # a message at the default priority beats no message at all
            log.warning("job %s: priority unknown (%s); sending at %d", job_id, exc,
                        DEFAULT_PRIORITY)  # fmt: skip
            return DEFAULT_PRIORITY

    def route_of(self, job_id: str) -> Route:
        """The job's (project, weight), read at most once per ROUTE_TTL_S."""
        now = time.monotonic()
        with self._lock:
            known = self._routes.get(job_id)
            if known is not None and now - known[0] < ROUTE_TTL_S:
                return known[1]
            if self._route_of is None:
                self._route_of = self._ledger().job_route
            route_of = self._route_of
        try:
            found = route_of(job_id)
        except FarmError as exc:  # the phase's own queue: every worker takes it
            log.warning("job %s: project unknown (%s); sending to the phase's own queue",
                        job_id, exc)  # fmt: skip
            return "", 1
        with self._lock:
            if len(self._routes) > 10_000:
                self._routes.clear()
            self._routes[job_id] = (now, found)
        return found

    def queue_of(self, task: str, job_id: str, chunk: int) -> str:
        """The queue a task of the job's goes to: its phase's own, or its project's lane for
        the chunk (farm.core.queues.route)."""
        project, weight = self.route_of(job_id)
        return queues.route(str(TASK_QUEUES[task]), project, weight, chunk)

    def _send(
        self,
        task: str,
        payload: dict[str, Any],
        countdown_s: float = 0,
        priority: int | None = None,
    ) -> str:
        try:
            result = self.app.send_task(
                task,
                kwargs=payload,
                queue=self.queue_of(task, payload["job_id"], int(payload.get("chunk", -1))),
                priority=broker_priority(
                    self.priority_of(payload["job_id"]) if priority is None else priority
                ),
                countdown=countdown_s or None,
                ignore_result=True,  # no result is kept (task_ignore_result): none to wait on
                retry=True,
                retry_policy={"max_retries": 5, "interval_start": 0.5, "interval_step": 1},
            )
        except OperationalError as exc:
            raise UnreachableError(f"the broker does not answer; could not send {task}") from exc
        except (RuntimeError, RedisError) as exc:  # the result backend's connection (TLS, auth)
            cause = exc.__cause__ or exc
            raise UnreachableError(f"the broker refused the connection ({cause}); could not "
                                   f"send {task}") from exc  # fmt: skip
        except ValueError as exc:  # a broker URL Celery cannot use
            raise ConfigError(f"the broker URL cannot be used: {exc}") from exc
        return str(result.id)

    def send(
        self, phase: Phase, job_id: str, chunk: int, countdown_s: float = 0,
        priority: int | None = None,
    ) -> str:  # fmt: skip
        """Send a chunk's phase to its queue (the task name and queue come from the pipeline);
        `priority`: a farm priority other than the job's (a preview chunk's, the farm's top)."""
        payload = {"job_id": job_id, "chunk": chunk}
        return self._send(spec_of(phase).task, payload, countdown_s, priority)

    def stitch(self, job_id: str, countdown_s: float = 0) -> str:
        return self._send(STITCH.task, {"job_id": job_id}, countdown_s)


def add_consumers(
    app: Celery, workers: Mapping[str, Sequence[str]], lanes: Mapping[str, int]
) -> dict[str, list[str]]:
    """Tell each live worker (`workers`: name -> the phase queues it serves, from its
    heartbeat) to consume the project lanes (`lanes`: project -> lanes) of those phases, by
    Celery's add_consumer broadcast, so a project's first job is taken at once. A worker that
    misses it catches up by itself (workers.__main__). The queues asked of each worker."""
    asked: dict[str, list[str]] = {}
    for name, served in sorted(workers.items()):
        wanted = [q for q in queues.consumed(list(served), lanes) if q not in set(served)]
        for queue in wanted:
            try:
                app.control.add_consumer(queue, destination=[name], reply=False)
            except OperationalError as exc:
                raise UnreachableError(f"the broker does not answer ({exc})") from exc
        asked[name] = wanted
    return asked


def ping_worker(settings: Settings, name: str, *, timeout_s: float) -> bool:
    """Whether the worker called `name` answers a ping through the broker within timeout_s."""
    try:
        replies = make_app(settings).control.ping(destination=[name], timeout=timeout_s)
    except OperationalError as exc:
        raise UnreachableError(f"the broker does not answer ({exc})") from exc
    return bool(replies)
