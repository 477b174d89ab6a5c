"""The calibration file the arbiter loads, and the files this package ships for named models.

A file holds a fitted (lambda_bind, tau) and the decision ``policy`` chosen for one model and
prompt version, with its provenance; the shipped files hold the policy the domain check
(``trustmargin check``) chose on their benchmark questions. A file without a ``policy`` means
the margin rule at its numbers. :func:`calibration_for` picks one,
:meth:`Calibration.check` refuses another model's, :meth:`Calibration.apply` applies it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trustmargin_integrations import strict_json
from trustmargin_integrations.config import ScoringForm, TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import write_text_atomic
from trustmargin_integrations.rule import Policy

Objective = Literal["f1", "em", "contains"]
"""The mean a calibration maximizes: token F1, exact match, or ``contains`` (a gold answer is
stated in the text, normalized, as whole words: the grade for chat and long-form answers,
whose F1 the text's length dilutes and whose exact match is about 0). Files written before
``contains`` existed hold ``f1`` or ``em`` and load as they are."""
OBJECTIVES: tuple[Objective, ...] = get_args(Objective)
OBJECTIVE_LABELS: dict[Objective, str] = {"f1": "F1", "em": "EM", "contains": "gold stated"}
"""How printouts name each objective's numbers."""


def check_objective(value: str, field: str = "objective") -> Objective:
    """``value`` as an :data:`Objective`, or a typed error naming ``field`` and when to use
    which."""
    if value not in OBJECTIVES:
        raise InvalidInputError(field, f"must be one of {', '.join(OBJECTIVES)}, got {value!r}",
                                "use f1 for short answers, contains for chat or long-form "
                                "answers (em: exact match)")
    return value


SHIPPED = "shipped"
"""``calibration="shipped"``: the file this package ships for a named model."""
AUTO = "auto"
"""``calibration="auto"`` (``from_pretrained``'s default): the file shipped for a named model
(the domain check's policy); for any other model, or when the caller's config sets the rule
itself, the config as given (the paper's rule by default)."""
_RULE_FIELDS = frozenset({"policy", "tau", "lambda_bind"})
logger = logging.getLogger(__name__)
_NUMBER_LIST = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]")


class IntervalResult(BaseModel):
    """A cross-validated mean (x100) with its bootstrap interval."""

    model_config = ConfigDict(extra="forbid")

    mean: float
    low: float
    high: float


class DifferenceResult(IntervalResult):
    """A paired difference (x100): interval and share of resamples above zero."""

    versus: str = Field(description="The method subtracted (best_single resolved).")
    p_positive: float


class FoldResult(BaseModel):
    """One fold: the fit on the other folds and the questions it was scored on."""

    model_config = ConfigDict(extra="forbid")

    lambda_bind: float
    tau: float
    n_train: int
    n_test: int


class ComparisonResult(BaseModel):
    """The calibrated rule against the default rule and the single sources, on questions
    the fit did not see, with paired bootstrap intervals."""

    model_config = ConfigDict(extra="forbid")

    seed: int
    objective: Objective
    resamples: int
    n: int
    sizes: dict[str, int] = Field(default_factory=dict,
                                  description="Dataset name -> questions compared.")
    methods: dict[str, IntervalResult] = Field(
        description="calibrated (held-out), default (0.5, -1.5), direct, rag: x100.")
    differences: dict[str, DifferenceResult]
    small_sample: bool


class CrossValidationResult(ComparisonResult):
    """k-fold estimate of the calibrated rule against the default rule and single sources."""

    folds: int
    fold_fits: list[FoldResult]


class RetrievalSetup(BaseModel):
    """How the run retrieved its evidence (from the run's manifest)."""

    model_config = ConfigDict(extra="forbid")

    mode: str | None = Field(None, description="e.g. precomputed, bm25:corpus.json")
    top_k: int | None = None


class FittedOn(BaseModel):
    """Which questions the final fit saw."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    datasets: dict[str, int] = Field(description="Dataset name -> number of questions.")
    n: int
    question_ids: list[str] = Field(
        default_factory=list,
        description="Ids of the questions fitted on (set when part of the run was held out).")
    holdout: float = Field(0.0, description="Share of the run's questions set aside.")
    split_seed: int | None = None


class Calibration(BaseModel):
    """A fitted (lambda_bind, tau) for one model and prompt version, with its provenance.

    Load it with :meth:`load`; ``TrustMargin.from_pretrained(model, calibration=path)``
    checks it against the loaded model (:meth:`check`) and applies it (:meth:`apply`).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model_id: str
    dtype: str | None = None
    backend_kind: str | None = Field(
        None, description="The engine the run was scored on (hf, openai, ...); None in files "
                          "written before it was recorded.")
    backend_model: str | None = Field(
        None, description="The model that engine ran (a local model's name, a server's "
                          "served name).")
    prompt_version: str
    retrieval: RetrievalSetup = Field(default_factory=RetrievalSetup)
    lambda_bind: float
    tau: float
    objective: Objective
    score: float = Field(description="Objective (x100) of the fit on the questions it saw.")
    default_score: float = Field(description="Objective (x100) of the paper's defaults on "
                                             "the same questions.")
    grid: dict[str, list[float]] = Field(description="The lambdas and taus searched.")
    fitted_on: FittedOn
    cv: CrossValidationResult | None = None
    held_out: ComparisonResult | None = Field(
        None, description="The fitted rule on the run's questions outside the fit.")
    policy: Policy | None = Field(
        None, description="The decision policy and its numbers (written by `trustmargin "
                          "check`); None: the margin rule with lambda_bind and tau.")
    scoring_form: ScoringForm | None = Field(
        None, description="How the answers the policy was chosen on were compared: a scoring "
                          "form of a chain's own texts (the check ran on records giving their "
                          "chain's answers; loading the file applies it), or None: the "
                          "model's own short answers, scored the paper's way.")
    evidence: dict[str, Any] | None = Field(
        None, description="The domain check's evidence (its PolicyCheckResult as JSON: the "
                          "verdict line, every candidate's cross-validated score and the "
                          "nested estimate), when `trustmargin check` wrote the file.")
    created_at: str
    package_version: str

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a calibration file written by ``trustmargin calibrate``."""
        file = Path(path)
        if not file.is_file():
            # Say what it is: a folder or /dev/null "does not exist" sent users looking for
            # a typo in a path that exists.
            what = ("is a directory" if file.is_dir() else
                    "is not a regular file (a device, FIFO or socket)" if file.exists()
                    else "does not exist")
            raise InvalidInputError("calibration", f"{file} {what}",
                                    "pass the file written by `trustmargin calibrate RUN_DIR` "
                                    "or `trustmargin check`")
        try:
            text = strict_json.read_text(file, "calibration")
            # Duplicate keys, NaN, nesting and huge integers: refused by the strict reader.
            strict_json.loads(text, "calibration",
                              "re-create it with `trustmargin calibrate RUN_DIR`")
        except InvalidInputError as exc:
            raise InvalidInputError("calibration", f"{file} is not a calibration file "
                                    f"(it {exc.problem})", exc.fix) from None
        try:
            # Strict types, at the top level and inside `policy`: `true` is not a number
            # and "-1.5" not -1.5 (lax validation read them as 1.0 and -1.5).
            return cls.model_validate_json(text, strict=True)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "file"
            given = repr(problem.get("input"))
            given = given if len(given) <= 40 else given[:39] + "…"
            raise InvalidInputError("calibration", f"{file} is not a calibration file "
                                    f"({where}: {problem['msg'].lower()}, got {given})",
                                    "re-create it with `trustmargin calibrate RUN_DIR`"
                                    ) from None

    @classmethod
    def coerce(cls, value: str | Path | Calibration, *, model: str | None = None
               ) -> Calibration:
        """A Calibration, the one stored at a path, or (``"shipped"``) the one this package
        ships for the named ``model``."""
        if isinstance(value, Calibration):
            return value
        if str(value) == SHIPPED:
            return cls.load(shipped_path(model))
        return cls.load(value)

    def save(self, path: str | Path) -> Path:
        """Write the calibration as indented JSON; return the path."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.model_dump(mode="json"), indent=1)
        # One line per list of numbers (the grid), not one line per number.
        text = _NUMBER_LIST.sub(lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text)
        write_text_atomic(file, text + "\n")
        return file

    def check(self, model_id: str, prompt_version: str) -> None:
        """Refuse a model or prompt version other than the one the fit was made with.

        Margins are log-likelihood differences of one model under one set of prompts; a
        threshold fitted on another model's margins has no meaning for this one.
        """
        if model_id != self.model_id:
            raise InvalidInputError(
                "calibration", f"was fitted for model {self.model_id!r}, not {model_id!r}",
                f"load {self.model_id!r}, or calibrate on a run of {model_id!r}: "
                f"`trustmargin eval --model ...` then `trustmargin calibrate RUN_DIR`")
        if prompt_version != self.prompt_version:
            raise InvalidInputError(
                "calibration", f"was fitted with prompt version {self.prompt_version!r}, "
                f"this package uses {prompt_version!r}",
                "re-run `trustmargin eval` with this package, then `trustmargin calibrate`")

    def checked_config(self, model_id: str, prompt_version: str,
                       config: TrustMarginConfig | None = None) -> TrustMarginConfig:
        """The config this file gives ``model_id`` (:meth:`check`, then :meth:`apply`), every
        refusal named ``calibration``: a number the config refuses (``tau`` 1e10) is the
        file's fault, and is found before any model loads."""
        self.check(model_id, prompt_version)
        try:
            return self.apply(config)
        except InvalidInputError as exc:
            raise InvalidInputError("calibration", f"holds a value the arbiter refuses "
                                    f"({exc.field}: {exc.problem})",
                                    "re-create it with `trustmargin calibrate RUN_DIR` or "
                                    "`trustmargin check`") from None

    def warn_other_backend(self, kind: str, model: str) -> None:
        """Log a warning when the file was fitted on another engine or engine model than
        ``kind``/``model`` (a quantized server's margins differ from the local model's by a
        few hundredths: usable, but not the numbers the fit saw). Silent for files that do
        not record it."""
        if self.backend_kind is None and self.backend_model is None:
            return
        fitted = f"{self.backend_kind or '?'}:{self.backend_model or '?'}"
        if fitted != f"{kind}:{model}":
            logger.warning("calibration fitted on backend %s is loaded with backend %s:%s; "
                           "its margins may differ from the fit's (run `trustmargin check` "
                           "on this backend for its own policy)", fitted, kind, model)

    @property
    def decision_policy(self) -> Policy:
        """The policy this file applies (a file without one: the rule with its numbers)."""
        if self.policy is not None:
            return self.policy
        return Policy.from_setting("rule", self.lambda_bind, self.tau)

    def apply(self, config: TrustMarginConfig | None = None) -> TrustMarginConfig:
        """``config`` (default: the paper's) with the file's lambda_bind, tau and policy
        (the policy's own numbers, where it has them, win) and, for a policy chosen on a
        chain's own answers, the scoring form they were compared under; validated."""
        base = config or TrustMarginConfig()
        update = {"lambda_bind": self.lambda_bind, "tau": self.tau,
                  **self.decision_policy.setting,
                  **({"scoring_form": self.scoring_form} if self.scoring_form else {})}
        updated = base.model_copy(update=update)
        return TrustMarginConfig.model_validate(updated.model_dump())


def shipped_models() -> list[str]:
    """Named models with a calibration file in this package."""
    folder = files("trustmargin_integrations").joinpath("calibrations")
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir()
                  if p.name.endswith(".json"))


def shipped_path(model: str | None) -> Path:
    """The calibration file shipped for ``model`` (a named model such as qwen2.5-1.5b)."""
    available = shipped_models()
    if model not in available:
        raise InvalidInputError(
            "calibration", f"no calibration is shipped for model {model!r} (shipped: "
            f"{', '.join(available) or 'none'})",
            "use one of those models, or fit your own: `trustmargin eval --model ...` then "
            "`trustmargin calibrate RUN_DIR`")
    return Path(str(files("trustmargin_integrations").joinpath(f"calibrations/{model}.json")))


_TOLD: set[str] = set()
_TOLD_LOCK = threading.Lock()


def _tell_once(model: str) -> None:
    """Log, once per model and process, that no policy is shipped and the paper's rule runs."""
    with _TOLD_LOCK:
        if model in _TOLD:
            return
        _TOLD.add(model)
    logger.warning(
        "No decision policy is shipped for model %r: the paper's rule (lambda_bind 0.5, tau "
        "-1.5) decides. It does not help on every domain; run `trustmargin check "
        "questions.jsonl --model %s` on 50 or more labeled questions of yours and load its "
        "policy.json with from_pretrained(model, calibration=...). Pass calibration=None to "
        "choose the paper's rule explicitly (and silence this message).", model, model)


def calibration_for(value: Any, model: str,
                    config: TrustMarginConfig | Mapping[str, Any] | None = None
                    ) -> Calibration | None:
    """The calibration ``TrustMargin.from_pretrained(model, config=..., calibration=value)``
    applies (None: the config as given, the paper's rule by default). Reads no model.

    - :data:`AUTO` (the default): the policy shipped for a named model (``trustmargin check``'s
      verdict for it); a model without one gets the paper's rule, and a warning is logged once
      saying the domain check should decide. A config that sets ``policy``, ``tau`` or
      ``lambda_bind`` itself keeps its own rule.
    - None: the config as given (the paper's rule unless the config says otherwise).
    - :data:`SHIPPED`, a path or a :class:`Calibration`: that calibration
      (:meth:`Calibration.coerce`).

    Raises:
        InvalidInputError: (field ``calibration``) no such file, or not a calibration file,
            or ``"shipped"`` for a model without one.
    """
    if value is None:
        return None
    if isinstance(value, str) and value == AUTO:
        given = set(config) if isinstance(config, Mapping) else (
            config.model_fields_set if config is not None else set())
        if given & _RULE_FIELDS:
            return None
        if model in shipped_models():
            return Calibration.load(shipped_path(model))
        _tell_once(model)
        return None
    if not isinstance(value, str | Path | Calibration):
        raise InvalidInputError("calibration", f"a {type(value).__name__} is not a "
                                "calibration", f"pass {AUTO!r} (the default), None for the "
                                f"paper's rule, {SHIPPED!r}, a file path or a Calibration")
    return Calibration.coerce(value, model=model)
