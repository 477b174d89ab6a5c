"""Every refusal that can be made before the model loads is made before it, naming the file
line or the option the user wrote.

Before: a blank question in ``check`` was refused after the model had loaded and scored
(28.9 s), as ``inputs[2].question``; ``ask --calibration`` with ``tau`` 1e10 or a policy fitted
for another model was refused after the load (9-15 s), the first without naming
``--calibration``; a directory or ``/dev/null`` as ``--calibration`` was said not to exist.

Each test sets a tripwire on the local engine's loader (the real ``HFBackend.load`` replaced
by one that fails the test): a refusal that comes after the load trips it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_support import DEMO, run_main

import trustmargin_integrations
from trustmargin_integrations import TrustMargin
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.errors import InvalidInputError

SHIPPED = Path(trustmargin_integrations.__file__).parent / "policies"
ASK = ["ask", "Who designed the Eiffel Tower?", "--corpus", str(DEMO / "corpus.json"),
       "--direct-answer", "Gustave Eiffel", "--rag-answer", "Maurice Koechlin"]


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def tripwire(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(HFBackend, "load", tripwire)


def _calibration(tmp_path: Path, **changes: object) -> Path:
    record = json.loads((SHIPPED / "smollm2-135m.json").read_text())
    record.update(changes)
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(record))
    return path


def test_a_blank_question_is_named_by_its_line_before_the_model(tmp_path: Path,
                                                                no_load: None) -> None:
    labeled = tmp_path / "mine.jsonl"
    labeled.write_text("".join(json.dumps(r) + "\n" for r in (
        {"question": "Who designed the Eiffel Tower?", "answers": ["Gustave Eiffel"]},
        {"question": "Where is the Louvre?", "answers": ["Paris"]},
        {"question": " \u200b\t", "answers": ["x"]})), encoding="utf-8")
    run = run_main("check", str(labeled), "--corpus", str(DEMO / "corpus.json"))
    assert run.exit_code == 2, run.output
    assert run.output.startswith("error mine.jsonl:3.question: is empty"), run.output
    assert not (tmp_path / "mine.jsonl.check").exists()


@pytest.mark.parametrize(("changes", "expected"), [
    ({"policy": {"kind": "bind_only", "tau": 1e10}},
     "error --calibration: holds a value the arbiter refuses (tau: "),
    ({"model_id": "qwen2.5-1.5b"},
     "error --calibration: was fitted for model 'qwen2.5-1.5b', not 'smollm2-135m'"),
    # A field the file's policy does not use, named by its place in the file.
    ({"tau": -1.5}, "error --calibration tau: {path} holds 'tau', which is not a field"),
])
def test_a_calibration_is_checked_before_the_model(tmp_path: Path, no_load: None,
                                                   changes: dict[str, object],
                                                   expected: str) -> None:
    path = _calibration(tmp_path, **changes)
    expected = expected.replace("{path}", str(path))
    run = run_main(*ASK, "--calibration", str(path))
    assert run.exit_code == 2, run.output
    assert run.output.startswith(expected), run.output
    # The library names the argument (and the place in the file) as the CLI names the option.
    field, _, problem = expected.removeprefix("error --").partition(": ")
    with pytest.raises(InvalidInputError, match=f"^{field.replace(' ', '.')}: "
                                                f"{re.escape(problem[:20])}"):
        TrustMargin.from_pretrained("smollm2-135m", calibration=path)


@pytest.mark.parametrize(("given", "what"), [
    ("folder", "is a directory"),
    ("/dev/null", "is not a regular file (a device, FIFO or socket)"),
])
def test_a_calibration_that_is_no_file_says_what_it_is(tmp_path: Path, no_load: None,
                                                       given: str, what: str) -> None:
    path = tmp_path if given == "folder" else Path(given)
    run = run_main(*ASK, "--calibration", str(path))
    assert run.exit_code == 2, run.output
    assert run.output.startswith(f"error --calibration: {path} {what}"), run.output
