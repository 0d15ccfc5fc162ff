"""The no-op job of the queue bench, importable by name (RQ stores `_noop.noop` in the job)."""


def noop(*_args, **_kw):
    return None


async def anoop(_ctx, *_args, **_kw):
    return None
