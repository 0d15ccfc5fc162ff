"""The process's dlm client and task functions, made on first use (so that a
server that forks its workers, e.g. gunicorn --preload, makes them after the fork)."""
from __future__ import annotations

import functools

from django.conf import settings

import dlm
from dlm.tasks import TaskFunction, Tasks


@functools.lru_cache(maxsize=None)
def client() -> dlm.Client:
    return dlm.Client(settings.DLM_REDIS_URL)


class Jobs:
    """The task functions of the ``emails`` queue."""

    def __init__(self) -> None:
        self.tasks = Tasks(client(), "emails")

        @self.tasks.task
        def send_welcome(user: str) -> str:
            # django.core.mail.send_mail(...) in a real project
            return f"welcome sent to {user}"

        self.send_welcome: TaskFunction[str] = send_welcome


@functools.lru_cache(maxsize=None)
def jobs() -> Jobs:
    return Jobs()
