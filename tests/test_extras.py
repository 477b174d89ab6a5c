"""A feature whose install extra is missing is a typed error naming the extra, never a
``ModuleNotFoundError`` from deep inside an import; the ``trustmargin`` console script prints
it as one line. Each case runs in a fresh interpreter with the extra's package blocked
(``sys.modules[name] = None``: Python then finds no such module)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from import_support import ROOT

EXTRA_LINE = "Fix: pip install 'trustmargin-integrations[{}]'"


def _run(code: str, *blocked: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (this checkout first on the path) without ``blocked``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    prelude = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


def _missing_extra(code: str, *blocked: str) -> tuple[str, list[str], str]:
    """(extra, missing modules, message) of the MissingExtraError ``code`` raises."""
    result = _run("from trustmargin_integrations.errors import MissingExtraError\n"
                  "try:\n" + "".join(f"    {line}\n" for line in code.splitlines())
                  + "except MissingExtraError as exc:\n"
                  "    print(exc.extra); print(','.join(exc.missing)); print(exc)\n"
                  "else:\n    print('no error')\n", *blocked)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    if lines == ["no error"]:
        return "no error", [], ""
    extra, missing, message = lines
    return extra, missing.split(","), message


@pytest.mark.parametrize("how", [
    "from trustmargin_integrations.__main__ import main\nmain(['demo'])",
    "import runpy\nrunpy.run_module('trustmargin_integrations', run_name='__main__')",
])
def test_the_command_without_typer_is_one_line_naming_the_cli_extra(how: str) -> None:
    result = _run(how, "typer")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error The trustmargin command line needs typer")
    assert lines[0].endswith(EXTRA_LINE.format("cli"))


def test_the_console_script_is_the_guarded_entry_point() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"trustmargin": "trustmargin_integrations.__main__:main"}
    # With typer installed it is the CLI itself.
    pytest.importorskip("typer")
    result = _run("from trustmargin_integrations.__main__ import main\nmain(['--help'])")
    assert result.returncode == 0, result.stderr
    assert "demo" in result.stdout and "score" in result.stdout


def test_importing_the_cli_without_typer_names_the_extra() -> None:
    # What check_chain (a root export that lives in the CLI) meets on such an install.
    extra, missing, message = _missing_extra(
        "from trustmargin_integrations import check_chain", "typer")
    assert (extra, missing) == ("cli", ["typer"])
    assert message.endswith(EXTRA_LINE.format("cli"))


def test_bm25_without_its_engine_names_the_bm25_extra() -> None:
    extra, missing, message = _missing_extra(
        "from trustmargin_integrations.retrieval import BM25Index", "bm25s", "Stemmer")
    assert (extra, missing) == ("bm25", ["bm25s", "Stemmer"])
    assert message.startswith("BM25Index (the embedded BM25 retrieval) needs bm25s, Stemmer")
    assert EXTRA_LINE.format("bm25") in message


def test_structured_output_without_jsonschema_names_the_langchain_extra() -> None:
    extra, missing, message = _missing_extra(
        "from trustmargin_integrations.guided import check\n"
        "check({'name': 'Ada'}, {'type': 'object'}, lambda value: value, '{}')", "jsonschema")
    assert (extra, missing) == ("langchain", ["jsonschema"])
    assert EXTRA_LINE.format("langchain") in message


def test_with_every_extra_installed_nothing_is_refused() -> None:
    # The same calls with nothing blocked: the error above comes from the block, not the code.
    pytest.importorskip("typer")
    pytest.importorskip("bm25s")
    pytest.importorskip("jsonschema")
    result = _missing_extra(
        "from trustmargin_integrations import check_chain\n"
        "from trustmargin_integrations.retrieval import BM25Index\n"
        "from trustmargin_integrations.guided import check\n"
        "check({'name': 'Ada'}, {'type': 'object'}, lambda value: value, '{}')")
    assert result[0] == "no error"
