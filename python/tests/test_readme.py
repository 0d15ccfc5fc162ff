"""The Python examples of python/README.md and of the repository's README.md run, in order,
against a real redis-server."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
ROOT_README = Path(__file__).resolve().parent.parent.parent / "README.md"


def run_blocks(readme: Path, redis_url: str, at_least: int) -> None:
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    assert len(blocks) >= at_least
    scope: dict[str, object] = {"REDIS_URL": redis_url, "__name__": "readme"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{readme}:python-block-{i}", "exec"), scope)


def test_readme_examples(redis_url: str) -> None:
    run_blocks(README, redis_url, 5)


def test_the_repositorys_readme_python_section(redis_url: str) -> None:
    run_blocks(ROOT_README, redis_url, 1)


def test_readme_examples_pass_mypy_strict(tmp_path: Path) -> None:
    """A user who copies an example into a typed code base gets no error from
    `mypy --strict` (issue 33: the root README's fence was an Optional[int])."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("mypy") is None:
        import pytest

        pytest.skip("mypy is not installed")
    for readme in (README, ROOT_README):
        blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
        src = tmp_path / f"{readme.parent.name}_readme.py"
        src.write_text("import dlm\nREDIS_URL: str = ''\n" + "\n".join(blocks))
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(src)],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stdout + out.stderr
