"""The docs' Node example for ``/v1/responses`` (docs/guides/proxy.md), run by Node with the official ``openai`` npm
package against a real proxy in front of the recording fake upstream.

The package is installed from the npm registry into a temporary folder once per test session;
without Node or the registry the test skips on a developer's machine and fails under ``CI=true``
(``.ci/run`` installs Node when it is missing).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.serve.conftest import FakeUpstream, StartProxy

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-client-node-0123456789"


@pytest.fixture(scope="module")
def node_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the ``openai`` npm package installed, where an ES module can import it."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("needs Node and npm (apt-get install nodejs npm)")
    folder = tmp_path_factory.mktemp("node")
    (folder / "package.json").write_text('{"name": "readme-example", "private": true, "type": "module"}\n')
    installed = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "openai@>=5"],
        cwd=folder,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0:
        pytest.skip(f"npm could not install the openai package: {installed.stderr[-500:]}")
    return folder


def readme_js() -> str:
    text = (ROOT / "docs" / "guides" / "proxy.md").read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"```js\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 1, "the proxy guide has one Node example"
    return blocks[0]


def test_the_node_example_calls_the_proxy(
    node_project: Path, start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.clear()
    with start_proxy() as proxy:
        script = node_project / "example.mjs"
        script.write_text(readme_js().replace("http://127.0.0.1:8080/v1", proxy.base_url), encoding="utf-8")
        done = subprocess.run(
            ["node", str(script)],
            cwd=node_project,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env={"OPENAI_API_KEY": KEY, "PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "echo: Summarise ticket 42\n"
    [record] = [r for r in fake_upstream.received() if r["path"] == "/v1/responses"]
    assert record["authorization"] == f"Bearer {KEY}"
    assert record["body"]["input"] == [{"role": "user", "content": "Summarise ticket 42"}]
