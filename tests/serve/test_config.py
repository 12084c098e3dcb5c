"""The serve command's configuration: flags, config files, and mistakes stopped before listening."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from contextledger.cli import _parser, main
from contextledger.compaction import SlidingWindowStrategy, TokenBudgetComposedStrategy
from contextledger.exceptions import ConfigurationError
from contextledger.serve import ServeConfig, StrategySpec
from contextledger.serve._command import config_from_args

UPSTREAM = "http://127.0.0.1:9/v1"


def config(*argv: str) -> ServeConfig:
    return config_from_args(_parser().parse_args(["serve", *argv]))


def test_flags_build_the_strategies_with_the_compact_syntax() -> None:
    made = config(
        "--upstream",
        UPSTREAM,
        "--strategy",
        "sliding-window",
        "--param",
        "trigger=turns_exceed(4)",
        "--retain-budget",
        "4000",
        "--no-facts",
        "--port",
        "9999",
    )
    assert isinstance(made.strategy.build(), SlidingWindowStrategy)
    assert isinstance(made.retain.build(), TokenBudgetComposedStrategy)
    assert (made.facts, made.port, made.host, made.trust_tenant_header) == (False, 9999, "127.0.0.1", False)
    assert made.store == "sqlite:contextledger-serve.db"


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_config_file_is_read_and_flags_win_over_it(tmp_path: Path, suffix: str) -> None:
    if suffix == ".toml" and sys.version_info < (3, 11):
        pytest.skip("TOML needs Python 3.11")
    path = tmp_path / f"serve{suffix}"
    if suffix == ".json":
        path.write_text(
            json.dumps(
                {
                    "upstream": UPSTREAM,
                    "port": 8100,
                    "strategy": "truncation",
                    "param": ["max_n=50", "compact_to=20"],
                    "lock_timeout": 5,
                }
            )
        )
    else:
        path.write_text(
            f'upstream = "{UPSTREAM}"\nport = 8100\nstrategy = "truncation"\n'
            'param = ["max_n=50", "compact_to=20"]\nlock_timeout = 5\n'
        )
    made = config("--config", str(path), "--port", "8200")
    assert made.port == 8200
    assert made.lock_timeout == 5
    assert made.strategy == StrategySpec("truncation", ("max_n=50", "compact_to=20"))


def test_the_upstream_key_comes_from_the_environment_and_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLEDGER_UPSTREAM_KEY", "sk-hidden-777")
    made = config("--upstream", UPSTREAM)
    assert made.upstream_key == "sk-hidden-777"
    assert "sk-hidden-777" not in repr(made)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--upstream", "localhost:8000"], "base URL"),
        (["--upstream", UPSTREAM, "--store", "mysql://x"], "sqlite:PATH, a redis:// URL"),
        (
            ["--upstream", UPSTREAM, "--strategy", "sliding-window", "--param", "keep_last=3"],
            "no parameter 'keep_last'",
        ),
        (["--upstream", UPSTREAM, "--strategy", "telepathy"], "unknown strategy 'telepathy'"),
        (["--upstream", UPSTREAM, "--lock-timeout", "0"], "lock_timeout"),
        (["--upstream", UPSTREAM, "--lock-lease", "-1"], "lock_lease"),
        (["--upstream", UPSTREAM, "--facts-schema", "no-such-schema.json"], "'no-such-schema.json' does not exist"),
        ([], "needs --upstream"),
    ],
)
def test_mistakes_stop_the_command_before_it_listens(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_config_file_with_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "serve.json"
    path.write_text(json.dumps({"upstream": UPSTREAM, "prot": 8000}))
    with pytest.raises(ConfigurationError, match=r"unknown setting.*prot"):
        config("--config", str(path))
    path.write_text("{not json")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        config("--config", str(path))


def test_the_command_line_starts_without_the_serve_extra_and_create_app_names_it() -> None:
    script = (
        "import sys\n"
        "sys.modules['starlette'] = None\n"
        "from contextledger.cli import main\n"
        "from contextledger.serve import ServeConfig, create_app\n"
        f"try:\n    create_app(ServeConfig(upstream={UPSTREAM!r}))\n"
        "except ImportError as error:\n    print(type(error).__name__, error)\n"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'httpx') if sys.modules.get(m)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert "MissingExtraError contextledger serve needs the 'serve' extra" in done.stdout
    assert "pip install 'contextledger[serve]'" in done.stdout
    assert done.stdout.strip().endswith("[]")  # the command line imported none of them


def test_a_config_file_of_dash_is_read_from_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = {"upstream": UPSTREAM, "port": 8300, "strategy": "sliding-window", "param": ["keep_last_groups=3"]}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(settings).encode())))
    made = config("--config", "-")
    assert made.port == 8300
    assert isinstance(made.strategy.build(), SlidingWindowStrategy)


def test_ctrl_c_stops_the_proxy_with_status_130_and_no_traceback(tmp_path: Path) -> None:
    def interruptible() -> None:  # a shell running the suite in the background starts children with SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    command = [sys.executable, "-m", "contextledger.cli", "serve", "--upstream", UPSTREAM, "--port", "0"]
    child = subprocess.Popen(
        [*command, "--store", f"sqlite:{tmp_path / 'serve.db'}"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,  # noqa: PLW1509  (the suite starts no threads that could deadlock here)
    )
    assert child.stderr is not None
    try:
        while "Uvicorn running on" not in (line := child.stderr.readline()):
            assert line, "the proxy stopped before it listened"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "contextledger: interrupted"


def test_the_price_profile_of_the_estimate_is_chosen_by_name(tmp_path: Path) -> None:
    assert config("--upstream", UPSTREAM).price_profile == "openai"
    assert config("--upstream", UPSTREAM, "--price-profile", "anthropic").price_profile == "anthropic"
    assert config("--upstream", UPSTREAM, "--price-profile", "gpt-5.6").price_profile == "gpt-5.6"
    path = tmp_path / "serve.json"
    path.write_text(json.dumps({"upstream": UPSTREAM, "price_profile": "cheapest"}))
    with pytest.raises(ConfigurationError, match=r"unknown price profile 'cheapest': use one of anthropic, gpt-5\.6"):
        config("--config", str(path))
