"""With no optional extra installed, every test module still imports, and says which extra it needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.optional_imports import try_import

ROOT = Path(__file__).resolve().parent.parent


def pytest_without_extras(*arguments: str, ci: bool = False) -> subprocess.CompletedProcess[str]:
    """``pytest ARGUMENTS`` in a subprocess that sees no optional package (``tests/core_only.py``)."""
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    if ci:
        environment["CI"] = "true"
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    # Plugins installed by the extras (the kit's, LangSmith's, anyio's) are not loaded: a core
    # environment has only hypothesis's.
    environment["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    command = [sys.executable, "-m", "pytest", "-p", "_hypothesis_pytestplugin", "-p", "tests.core_only"]
    command += ["-p", "no:cacheprovider", "-q", "-rs", *arguments]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, check=False)


def test_the_suite_collects_cleanly_without_any_extra() -> None:
    result = pytest_without_extras("--collect-only", "tests")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "ERROR" not in output, output
    # A module that needs an extra is collected (its tests skip when run), or, when its own top
    # level needs the extra, skipped whole with the extra named in the summary.
    assert "tests/clients/test_openai_client.py: " in output
    assert "needs the 'maf' extra (agent_framework is not installed): pip install -e '.[maf]'" in output


def test_without_the_extra_its_tests_skip_naming_it_and_under_ci_the_skips_fail() -> None:
    module = "tests/clients/test_openai_client.py"
    skipped = pytest_without_extras(module)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "needs the 'openai' extra (openai is not installed): pip install -e '.[openai]'" in skipped.stdout
    assert " passed" not in skipped.stdout
    failed = pytest_without_extras(module, "-x", ci=True)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "skipped under CI=true, where every test must run: needs the 'openai' extra" in failed.stdout


def test_a_missing_package_is_recorded_with_its_extra() -> None:
    with try_import("thing") as thing:
        import contextledger_no_such_package  # type: ignore[import-not-found]  # noqa: F401, PLC0415
    assert not thing.installed
    assert thing.reason == (
        "needs the 'thing' extra (contextledger_no_such_package is not installed): pip install -e '.[thing]'"
    )
    assert thing.skip.kwargs["reason"] == thing.reason
    assert thing.skip.args == (True,)


def test_an_import_of_ours_that_fails_is_not_taken_for_a_missing_extra() -> None:
    with pytest.raises(ImportError), try_import("thing"):
        from contextledger.messages import no_such_name  # type: ignore[attr-defined]  # noqa: F401, PLC0415
    with pytest.raises(ModuleNotFoundError), try_import("thing"):
        import tests.no_such_helper  # type: ignore[import-not-found]  # noqa: F401, PLC0415


def test_an_installed_package_skips_nothing() -> None:
    with try_import("thing") as thing:
        import json  # noqa: F401, PLC0415
    assert thing.installed
    assert thing.skip.args == (False,)
