"""The Celery side of the farm: app settings for long tasks, and sending tasks by name.

farm never imports workers; it only knows the task names and queues below.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from farm.errors import UnreachableError
from farm.settings import Settings

RENDER_TASK = "farm.render_chunk"
ENCODE_TASK = "farm.encode_chunk"
STITCH_TASK = "farm.stitch_job"
TRANSCODE_TASK = "farm.transcode_segment"

VISIBILITY_TIMEOUT_S = 12 * 3600
"""Longer than any chunk may run: Redis redelivers unacked messages after this long. The ledger's
leases, not this timeout, are what bring a lost chunk back quickly."""


class Queue(StrEnum):
    RENDER = "render"
    """Blender renders: any worker with Cycles (GPU, else CPU)."""
    ENCODE = "encode"
    """Frames to segments, masters to segments: workers with NVENC, or CPU-only workers."""
    STITCH = "stitch"
    """Joining segments by stream copy: any worker."""


TASK_QUEUES = {
    RENDER_TASK: Queue.RENDER,
    ENCODE_TASK: Queue.ENCODE,
    STITCH_TASK: Queue.STITCH,
    TRANSCODE_TASK: Queue.ENCODE,
}


def make_app(settings: Settings, name: str = "farm") -> Celery:
    settings.require_farm()
    app = Celery(name, broker=settings.redis_url, backend=settings.redis_url)
    transport = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
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
        result_expires=7 * 24 * 3600,
        task_track_started=True,
        task_send_sent_event=True,
        worker_send_task_events=True,
        task_routes={name: {"queue": str(queue)} for name, queue in TASK_QUEUES.items()},
        task_default_queue=str(Queue.RENDER),
        worker_hijack_root_logger=False,
        worker_max_tasks_per_child=50,
    )
    return app


class Dispatcher:
    """Sends chunk and stitch tasks by name; used by the CLI, the reconciler and workers."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def _send(self, task: str, payload: dict[str, Any], countdown_s: float = 0) -> str:
        try:
            result = self.app.send_task(
                task,
                kwargs=payload,
                queue=str(TASK_QUEUES[task]),
                countdown=countdown_s or None,
                retry=True,
                retry_policy={"max_retries": 5, "interval_start": 0.5, "interval_step": 1},
            )
        except OperationalError as exc:
            raise UnreachableError(f"the broker does not answer; could not send {task}") from exc
        return str(result.id)

    def render(self, job_id: str, chunk: int, countdown_s: float = 0) -> str:
        return self._send(RENDER_TASK, {"job_id": job_id, "chunk": chunk}, countdown_s)

    def encode(self, job_id: str, chunk: int, countdown_s: float = 0) -> str:
        return self._send(ENCODE_TASK, {"job_id": job_id, "chunk": chunk}, countdown_s)

    def stitch(self, job_id: str, countdown_s: float = 0) -> str:
        return self._send(STITCH_TASK, {"job_id": job_id}, countdown_s)

    def transcode(self, job_id: str, chunk: int, countdown_s: float = 0) -> str:
        """An encode job's segment: frames of the master straight to a segment, no render."""
        return self._send(TRANSCODE_TASK, {"job_id": job_id, "chunk": chunk}, countdown_s)
