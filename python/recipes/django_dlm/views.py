from __future__ import annotations

import time

from django.http import HttpRequest, JsonResponse

import dlm

from .dlm_setup import client, jobs


def reserve(request: HttpRequest, item: str) -> JsonResponse:
    """Holds a lock on the item while it works; 409 when it is reserved elsewhere."""
    try:
        with client().lock(f"stock:{item}", ttl=10.0) as guard:
            time.sleep(float(request.GET.get("work", "0")))  # update the stock in the database
            return JsonResponse({"item": item, "reserved": True, "fence": guard.fence})
    except dlm.Busy as e:
        return JsonResponse({"item": item, "reserved": False, "retry_in": e.ttl}, status=409)


def signup(request: HttpRequest, user: str) -> JsonResponse:
    """Queues the welcome mail; `python manage.py dlm_worker` sends it."""
    job = jobs().send_welcome.delay(user)
    return JsonResponse({"job": job.id, "status": job.status().value})
