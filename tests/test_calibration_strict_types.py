"""A calibration file's numbers are numbers: ``true`` and ``"-1.5"`` are refused at the top
level and inside ``policy``, before any model loads (before: lax validation read them as 1.0
and -1.5). Integers stay numbers (``"tau": -2``), and a file with a byte-order mark loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_main
from run_support import forbid_model_load, synthetic_run

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.calibration_file import Calibration
from trustmargin_integrations.errors import InvalidInputError


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real policy file (``trustmargin check`` on a synthetic run), as JSON."""
    root = tmp_path_factory.mktemp("cal")
    run = synthetic_run(root / "run", n=16)
    done = run_main("check", str(run), "--folds", "2", "--resamples", "200",
                    "--out", str(root / "policy.json"))
    assert done.exit_code == 0, done.output
    data: dict[str, Any] = json.loads((root / "policy.json").read_text())
    data["policy"] = {"kind": "fitted", "lambda_bind": 0.8, "tau": -0.25}
    return data


def _file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(("where", "value"), [
    (("tau",), True), (("tau",), "-1.5"), (("lambda_bind",), "0.5"), (("lambda_bind",), False),
    (("score",), True), (("policy", "tau"), "-0.25"), (("policy", "lambda_bind"), True),
    (("policy", "tau"), False),
])
def test_a_bool_or_a_numeric_string_is_refused(written: dict[str, Any], tmp_path: Path,
                                               where: tuple[str, ...], value: Any) -> None:
    data = json.loads(json.dumps(written))
    target = data
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(InvalidInputError) as err:
        Calibration.load(_file(tmp_path, data))
    assert err.value.field == "calibration"
    assert f"{'.'.join(where)}: input should be a valid number, got {value!r}" in str(err.value)
    # An integer is a number (and a file with a byte-order mark loads).
    target[where[-1]] = -2 if where[-1] == "tau" else 1
    path = tmp_path / "cal.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode("utf-8"))
    loaded = Calibration.load(path)
    owner = loaded.policy if where[0] == "policy" else loaded
    assert getattr(owner, where[-1]) == float(target[where[-1]])


def test_refused_before_the_model_loads(written: dict[str, Any], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    forbid_model_load(monkeypatch)
    bad = _file(tmp_path, {**written, "policy": {**written["policy"], "tau": "-0.25"}})
    with pytest.raises(InvalidInputError, match=r"policy\.tau"):
        TrustMargin.from_pretrained("synthetic", calibration=bad)
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([{"title": "T", "text": "Paris is in France."}]),
                      encoding="utf-8")
    run = run_main("ask", "Where is Paris?", "--corpus", str(corpus), "--calibration",
                   str(bad))
    assert run.exit_code == 2 and run.output.startswith("error --calibration:"), run.output
    assert "policy.tau: input should be a valid number" in run.output
