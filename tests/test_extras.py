"""Every optional extra reports its absence the same way: MissingExtraError with the pip line."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from contextledger import exceptions
from contextledger._extras import require_extra
from contextledger.exceptions import ContextLedgerError, MissingExtraError


def test_a_missing_package_names_the_feature_the_extra_and_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "somepkg_not_installed", None)
    with pytest.raises(MissingExtraError) as caught:
        require_extra("somepkg_not_installed", extra="thing", feature="The Thing")
    error = caught.value
    assert isinstance(error, ImportError)
    assert isinstance(error, ContextLedgerError)
    assert (error.feature, error.extra, error.install) == ("The Thing", "thing", "pip install 'contextledger[thing]'")
    assert str(error) == "The Thing needs the 'thing' extra (the 'somepkg_not_installed' package): " + error.install


def test_a_broken_dependency_of_an_installed_package_is_not_reported_as_a_missing_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "installed_but_broken.py").write_text("import dependency_that_is_gone\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as caught:
        require_extra("installed_but_broken", extra="x", feature="X")
    assert not isinstance(caught.value, MissingExtraError)
    assert caught.value.name == "dependency_that_is_gone"


@pytest.mark.parametrize(
    ("blocked", "module", "extra"),
    [
        ("agent_framework", "contextledger.integrations.maf", "maf"),
        ("llama_cpp", "contextledger.clients.local", "local"),
        ("langchain_core", "contextledger.integrations.langchain", "langchain"),
        ("langgraph", "contextledger.integrations.langchain", "langchain"),
        ("agents", "contextledger.integrations.openai_agents", "openai-agents"),
    ],
)
def test_integration_modules_raise_missing_extra_error_on_import(
    monkeypatch: pytest.MonkeyPatch, blocked: str, module: str, extra: str
) -> None:
    for name in [name for name in sys.modules if name == module or name.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)
    with pytest.raises(MissingExtraError, match=rf"pip install 'contextledger\[{extra}\]'") as caught:
        importlib.import_module(module)
    assert caught.value.extra == extra


def test_the_exception_tree_drawing_names_every_exported_exception() -> None:
    drawing = exceptions.__doc__ or ""
    for name in exceptions.__all__:
        assert f"── {name} " in drawing or f"    {name}\n" in drawing, name
