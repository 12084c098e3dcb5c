"""A skip under CI=true is a failure, except the one marked root_only, which stays a named skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = """
import pytest

def test_missing_server():
    pytest.skip("redis-server is not installed")

@pytest.mark.skipif(True, reason="needs a browser")
def test_missing_browser():
    pass

@pytest.mark.root_only
@pytest.mark.skipif(True, reason="root can write anywhere")
def test_only_for_ordinary_users():
    pass

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False

def test_plain():
    pass
"""


def run_sample(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE, encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    environment["PYTHONPATH"] = str(ROOT)
    if ci is not None:
        environment["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-p", "tests.ci_skips", "-p", "no:cacheprovider", "-rs"]
    command += ["-o", "markers=root_only: x", "--rootdir", str(tmp_path), str(sample)]
    return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, check=False)


def test_under_ci_a_skip_fails_unless_root_only(tmp_path: Path) -> None:
    result = run_sample(tmp_path, "true")
    assert result.returncode == 1, result.stdout + result.stderr
    # A skip in the test body fails it; a skip while setting up (skipif, a fixture) is an error.
    assert "1 failed, 1 passed, 1 skipped, 1 xfailed, 1 error" in result.stdout
    assert "skipped under CI=true, where every test must run: redis-server is not installed" in result.stdout
    assert "needs a browser" in result.stdout
    assert "SKIPPED [1] test_sample.py:" in result.stdout
    assert "root can write anywhere" in result.stdout


def test_under_ci_a_module_skipped_at_collection_fails(tmp_path: Path) -> None:
    sample = tmp_path / "test_module_skip.py"
    sample.write_text('import pytest\npytest.skip("no kit", allow_module_level=True)\n', encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    environment.update(PYTHONPATH=str(ROOT), CI="true")
    command = [sys.executable, "-m", "pytest", "-p", "tests.ci_skips", "-p", "no:cacheprovider", "--rootdir"]
    command += [str(tmp_path), str(sample)]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, check=False)
    assert result.returncode != 0, result.stdout
    assert "skipped under CI=true, where every test must run: no kit" in result.stdout


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_skips_stay_skips(tmp_path: Path, ci: str | None) -> None:
    result = run_sample(tmp_path, ci)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 3 skipped, 1 xfailed" in result.stdout
