"""Recipe: dlm in a FastAPI app.

- the lifespan connects one AsyncClient and starts a task worker beside the
  app (and stops it at shutdown);
- POST /orders/{id}/pay holds a lock on the order while it works: a second
  request for the same order meanwhile gets 409 (with the holder's TTL);
- POST /reports queues a job (dlm.tasks) and GET /jobs/{id} follows it.

Run: DLM_REDIS_URL=redis://127.0.0.1:6379 uvicorn fastapi_app:app
Tested by python/tests/test_recipes.py (httpx through FastAPI's TestClient).
"""
from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict

from fastapi import FastAPI, HTTPException

import dlm
from dlm.tasks import AsyncTasks, JobFailed, JobNotFound, JobTimeout

state: Dict[str, Any] = {}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    client = await dlm.AsyncClient.connect(os.environ["DLM_REDIS_URL"])
    tasks = AsyncTasks(client, "reports")

    @tasks.task
    async def build_report(customer: str) -> Dict[str, Any]:
        await asyncio.sleep(0.01)  # the real work
        return {"customer": customer, "rows": 3}

    state.update(client=client, tasks=tasks, build_report=build_report)
    # The worker beside the app: the same event loop, up to 8 jobs at once.
    worker = asyncio.ensure_future(tasks.work(concurrency=8))
    try:
        yield
    finally:
        worker.cancel()  # stops claiming; unfinished jobs go back to the queue
        await asyncio.gather(worker, return_exceptions=True)
        state.clear()


app = FastAPI(lifespan=lifespan)


@app.post("/orders/{order_id}/pay")
async def pay(order_id: str, work_seconds: float = 0.0) -> Dict[str, Any]:
    client: dlm.AsyncClient = state["client"]
    try:
        async with client.lock(f"orders:{order_id}", ttl=10.0) as guard:
            await asyncio.sleep(work_seconds)  # charge the card, write the order...
            return {"order": order_id, "paid": True, "fence": guard.fence}
    except dlm.Busy as e:
        raise HTTPException(409, f"order {order_id} is being paid (retry in {e.ttl}s)") from e


@app.post("/reports")
async def queue_report(customer: str) -> Dict[str, str]:
    job = await state["build_report"].delay(customer)
    return {"job": job.id}


@app.get("/jobs/{job_id}")
async def job_status(job_id: str, wait: float = 0.0) -> Dict[str, Any]:
    job = state["tasks"].job(job_id)
    try:
        return {"job": job_id, "status": "complete", "result": await job.result(timeout=wait)}
    except JobTimeout as e:
        return {"job": job_id, "status": e.status.value}
    except JobNotFound as e:
        raise HTTPException(404, str(e)) from e
    except JobFailed as e:
        return {"job": job_id, "status": "failed", "error": e.error}
