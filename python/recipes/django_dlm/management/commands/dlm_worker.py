"""`python manage.py dlm_worker [--concurrency N] [--stop-when-idle]`: runs the
project's dlm tasks until Ctrl-C or SIGTERM (or, with --stop-when-idle, until
the queue is empty)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...dlm_setup import jobs


class Command(BaseCommand):
    help = "Run the dlm task worker of the emails queue."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--stop-when-idle", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        report = jobs().tasks.work(options["concurrency"], options["stop_when_idle"])
        self.stdout.write(f"dlm_worker: {report}")
