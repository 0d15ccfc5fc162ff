"""The framework recipes of python/recipes run: FastAPI (lifespan, a lock around an endpoint,
a worker beside the app), Django (a lock in a view, the worker as a management command) and
the pytest fixtures dlm ships (dlm.testing), each against a real redis-server."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import dlm

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@pytest.fixture
def recipes_on_path(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("DLM_REDIS_URL", redis_url)
    monkeypatch.syspath_prepend(str(RECIPES))
    yield redis_url


def test_fastapi_recipe(recipes_on_path: str) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    import fastapi_app  # type: ignore[import-not-found]

    other = dlm.Client(recipes_on_path)
    with TestClient(fastapi_app.app) as http:
        r = http.post("/orders/7/pay")
        assert r.status_code == 200 and r.json()["paid"] is True, r.text
        first_fence = r.json()["fence"]
        # Held elsewhere (another replica of the app, a script, the CLI): 409.
        with other.lock("orders:7", ttl=10.0):
            r = http.post("/orders/7/pay")
            assert r.status_code == 409, r.text
            assert "being paid" in r.json()["detail"]
        r = http.post("/orders/7/pay")
        assert r.status_code == 200 and r.json()["fence"] > first_fence
        # A job, run by the worker the lifespan started beside the app.
        job = http.post("/reports", params={"customer": "acme"}).json()["job"]
        r = http.get(f"/jobs/{job}", params={"wait": 10})
        assert r.json() == {"job": job, "status": "complete",
                            "result": {"customer": "acme", "rows": 3}}, r.text
        assert http.get("/jobs/nope").status_code == 404


def test_django_recipe(recipes_on_path: str) -> None:
    pytest.importorskip("django")
    import django  # type: ignore[import-untyped,unused-ignore]
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]
    from django.core.management import call_command  # type: ignore[import-untyped,unused-ignore]
    from django.test import Client as DjangoClient  # type: ignore[import-untyped,unused-ignore]

    if not settings.configured:
        settings.configure(
            DEBUG=True, SECRET_KEY="recipe", ALLOWED_HOSTS=["*"], DATABASES={},
            INSTALLED_APPS=["django_dlm"], ROOT_URLCONF="django_dlm.urls",
            DLM_REDIS_URL=recipes_on_path,
        )
        django.setup()
    http = DjangoClient()
    r = http.get("/reserve/pen")
    assert r.status_code == 200 and r.json()["reserved"] is True, r.content
    other = dlm.Client(recipes_on_path)
    with other.lock("stock:pen", ttl=10.0):
        r = http.get("/reserve/pen")
        assert r.status_code == 409 and r.json()["reserved"] is False
        assert 0 < r.json()["retry_in"] <= 10
    r = http.get("/signup/ann")
    assert r.status_code == 200 and r.json()["status"] == "queued"
    job_id = r.json()["job"]
    out = io.StringIO()
    call_command("dlm_worker", "--stop-when-idle", stdout=out)
    assert "'acked': 1" in out.getvalue(), out.getvalue()
    from django_dlm.dlm_setup import jobs  # type: ignore[import-not-found]

    assert jobs().tasks.job(job_id).result(timeout=5) == "welcome sent to ann"


def test_pytest_fixture_recipe(tmp_path: Path) -> None:
    # A fresh pytest, as a user's project runs it: the dlm.testing plugin is found through the
    # package's pytest11 entry point (no conftest, no import of fixtures).
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(RECIPES / "pytest_example")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 passed" in r.stdout, r.stdout


def test_the_testing_server_is_stopped_by_its_context_manager() -> None:
    from dlm.testing import RedisServer

    with RedisServer() as srv:
        c = dlm.Client(srv.url)
        with c.lock("x", ttl=5.0) as g:
            assert g.fence is not None
        pid = srv.proc.pid if srv.proc else 0
    assert srv.proc is not None and srv.proc.poll() is not None, pid
