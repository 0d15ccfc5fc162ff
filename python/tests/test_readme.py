"""The Python examples of python/README.md run, in order, against a real redis-server."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples(redis_url: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 5
    scope: dict[str, object] = {"REDIS_URL": redis_url, "__name__": "readme"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{README}:python-block-{i}", "exec"), scope)
