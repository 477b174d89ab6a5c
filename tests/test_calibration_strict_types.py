"""A policy file's numbers are numbers: ``true`` and ``"-1.5"`` are refused at the top
level and inside ``policy``, before any model loads (before: lax validation read them as 1.0
and -1.5). Integers stay numbers (``"tau": -2``), and a file with a byte-order mark loads. A
field the file's policy does not use (a ``tau`` beside always-RAG) is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_main
from run_support import forbid_model_load, synthetic_run

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.policy_file import PolicyFile


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real policy file (``trustmargin check`` on a synthetic run), as JSON."""
    root = tmp_path_factory.mktemp("cal")
    run = synthetic_run(root / "run", n=16)
    done = run_main("check", str(run), "--folds", "2", "--resamples", "200",
                    "--out", str(root / "policy.json"))
    assert done.exit_code == 0, done.output
    data: dict[str, Any] = json.loads((root / "policy.json").read_text())
    data["policy"] = {"kind": "rule", "lambda_bind": 0.8, "tau": -0.25}
    data["score"] = 40.0  # the rule fit's in-sample score: allowed beside the rule
    return data


def _file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(("where", "value"), [
    (("score",), True), (("score",), "40"), (("policy", "tau"), "-0.25"),
    (("policy", "lambda_bind"), True), (("policy", "tau"), False),
])
def test_a_bool_or_a_numeric_string_is_refused(written: dict[str, Any], tmp_path: Path,
                                               where: tuple[str, ...], value: Any) -> None:
    data = json.loads(json.dumps(written))
    target = data
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(InvalidInputError) as err:
        PolicyFile.load(_file(tmp_path, data))
    assert err.value.field == "calibration"
    assert f"{'.'.join(where)}: input should be a valid number, got {value!r}" in str(err.value)
    # An integer is a number (and a file with a byte-order mark loads).
    target[where[-1]] = -2 if where[-1] in ("tau", "score") else 1
    path = tmp_path / "cal.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode("utf-8"))
    loaded = PolicyFile.load(path)
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


@pytest.mark.parametrize(("change", "field"), [
    # Files from before 0.1.0's policy files: the rule's numbers beside the policy.
    ({"tau": -1.5}, "calibration.tau"),
    ({"lambda_bind": 0.5}, "calibration.lambda_bind"),
    ({"policy": {"kind": "always_rag", "tau": None}}, "calibration.policy.tau"),
    ({"policy": {"kind": "always_rag"}, "score": 40.0}, "calibration.score"),
    ({"policy": {"kind": "bind_only", "lambda_bind": 0.5, "tau": -2.0}},
     "calibration.policy.lambda_bind"),
    ({"note": "mine"}, "calibration.note"),
])
def test_a_field_its_policy_does_not_use_is_refused_by_name(
        written: dict[str, Any], tmp_path: Path, change: dict[str, Any], field: str) -> None:
    """Never silently ignored: an unused tau would look like it set something."""
    with pytest.raises(InvalidInputError) as err:
        PolicyFile.load(_file(tmp_path, {**written, **change}))
    assert err.value.field == field
    assert err.value.fix.startswith(f"delete {field.removeprefix('calibration.')}") or \
        err.value.fix.startswith(f"delete {field.removeprefix('calibration.')!r}")


def test_a_written_file_holds_only_what_its_policy_uses(written: dict[str, Any],
                                                        tmp_path: Path) -> None:
    """always-RAG: no numbers at all; bind_only: its tau; the rule: both, with its fit."""
    for policy, numbers in (({"kind": "always_rag"}, set()),
                            ({"kind": "bind_only", "tau": -2.0}, {"tau"}),
                            ({"kind": "rule", "lambda_bind": 0.5, "tau": -1.5},
                             {"lambda_bind", "tau"})):
        data = {**written, "policy": policy}
        if policy["kind"] != "rule":
            data = {k: v for k, v in data.items() if k not in ("score", "default_score", "grid")}
        saved = PolicyFile.load(_file(tmp_path, data)).save(tmp_path / "saved.json")
        again: dict[str, Any] = json.loads(saved.read_text(encoding="utf-8"))
        assert set(again["policy"]) - {"kind"} == numbers
        assert "lambda_bind" not in again and "tau" not in again
        assert None not in again.values()
