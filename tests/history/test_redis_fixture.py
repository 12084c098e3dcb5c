"""Without a redis-server binary the Redis tests skip on a developer's machine and fail in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.optional_imports import try_import

with try_import("redis") as redis_extra:
    import redis  # noqa: F401  (the Redis test this runs needs it before it looks for the binary)

pytestmark = redis_extra.skip

ROOT = Path(__file__).resolve().parents[2]


def run_redis_test_without_binary(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    environment["PATH"] = str(tmp_path)  # an empty directory: no redis-server to be found
    if ci is not None:
        environment["CI"] = ci
    test = "tests/history/test_redis_failures.py::test_a_client_passed_in_is_used_and_left_open"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", test]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("ci", [None, "false"])
def test_missing_binary_skips_outside_ci(tmp_path: Path, ci: str | None) -> None:
    result = run_redis_test_without_binary(tmp_path, ci)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "redis-server is not installed" in result.stdout


def test_missing_binary_fails_in_ci(tmp_path: Path) -> None:
    result = run_redis_test_without_binary(tmp_path, "true")
    assert result.returncode != 0
    assert "CI must run the Redis tests, not skip them" in result.stdout
