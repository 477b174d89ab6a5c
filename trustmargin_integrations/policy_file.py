"""The policy file the arbiter loads, and the policy files this package ships (``policies/``).

A file holds the decision ``policy`` chosen for one model and prompt version with its
provenance, and only what that policy uses: its own numbers (``always_rag`` none,
``bind_only`` a ``tau``, ``rule`` a ``lambda_bind`` and a ``tau``, plus the rule fit's
``score``/``default_score``/``grid``); reading refuses any other field, naming it.
:func:`policy_file_for` picks one, :meth:`PolicyFile.check` refuses another model's,
:meth:`PolicyFile.apply` applies it.
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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer

from trustmargin_integrations import strict_json
from trustmargin_integrations.config import ScoringForm, TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import write_text_atomic
from trustmargin_integrations.rule import POLICIES, Policy

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
FIT_FIELDS = ("score", "default_score", "grid")
"""The rule fit's in-sample numbers: in a file only beside the rule they fitted."""
_REMAKE = "re-create it with `trustmargin check` (or `trustmargin calibrate RUN_DIR`)"
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


class PolicyFile(BaseModel):
    """A decision policy for one model and prompt version, with its provenance.

    Load it with :meth:`load`; ``TrustMargin.from_pretrained(model, calibration=path)``
    checks it against the loaded model (:meth:`check`) and applies it (:meth:`apply`).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model_id: str
    dtype: str | None = None
    backend_kind: str | None = Field(
        None, description="The engine the run was scored on (hf, openai, ...).")
    backend_model: str | None = Field(
        None, description="The model that engine ran (a local model's name, a server's "
                          "served name).")
    prompt_version: str
    retrieval: RetrievalSetup = Field(default_factory=RetrievalSetup)
    policy: Policy = Field(
        description="The decision policy: its name and the numbers it takes, no others.")
    objective: Objective
    score: float | None = Field(
        None, description="The fitted rule's objective (x100) on the questions it saw (only "
                          "beside the rule it fitted).")
    default_score: float | None = Field(
        None, description="The paper's rule's objective (x100) on the same questions (only "
                          "beside a fitted rule).")
    grid: dict[str, list[float]] | None = Field(
        None, description="The lambdas and taus the rule fit searched (only beside a fitted "
                          "rule).")
    fitted_on: FittedOn
    cv: CrossValidationResult | None = None
    held_out: ComparisonResult | None = Field(
        None, description="The policy on the run's questions outside the fit.")
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

    @field_serializer("policy")
    def _policy_numbers(self, policy: Policy) -> dict[str, Any]:
        """The policy's name and only the numbers it takes (``always_rag``: none)."""
        return {"kind": policy.name, **{k: getattr(policy, k) for k in policy.numbers}}

    def model_post_init(self, context: Any, /) -> None:
        """Refuse the rule fit's numbers beside any other policy (a file holds only what its
        policy uses)."""
        if self.policy.name != "rule":
            for name in FIT_FIELDS:
                if getattr(self, name) is not None:
                    raise InvalidInputError(
                        f"calibration.{name}", f"describes a fit of the margin rule, and this "
                        f"file's policy is {self.policy.name}", f"delete {name}, or {_REMAKE}")

    @classmethod
    def load(cls, path: str | Path) -> PolicyFile:
        """Read a policy file written by ``trustmargin check`` or ``trustmargin calibrate``.

        Raises:
            InvalidInputError: (field ``calibration``, or ``calibration.NAME`` for a field
                of the file) not a policy file, or a field its policy does not use.
        """
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
            data = strict_json.loads(text, "calibration", _REMAKE)
        except InvalidInputError as exc:
            raise InvalidInputError("calibration", f"{file} is not a policy file "
                                    f"(it {exc.problem})", exc.fix) from None
        _refuse_stray_fields(file, data)
        try:
            # Strict types, at the top level and inside `policy`: `true` is not a number
            # and "-1.5" not -1.5 (lax validation read them as 1.0 and -1.5).
            return cls.model_validate_json(text, strict=True)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "file"
            given = repr(problem.get("input"))
            given = given if len(given) <= 40 else given[:39] + "…"
            raise InvalidInputError("calibration", f"{file} is not a policy file "
                                    f"({where}: {problem['msg'].lower()}, got {given})",
                                    _REMAKE) from None

    @classmethod
    def coerce(cls, value: str | Path | PolicyFile, *, model: str | None = None
               ) -> PolicyFile:
        """A PolicyFile, the one stored at a path, or (``"shipped"``) the one this package
        ships for the named ``model``."""
        if isinstance(value, PolicyFile):
            return value
        if str(value) == SHIPPED:
            return cls.load(shipped_path(model))
        return cls.load(value)

    def save(self, path: str | Path) -> Path:
        """Write the policy file as indented JSON (fields without a value left out); return
        the path."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.model_dump(mode="json", exclude_none=True), indent=1)
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
            logger.warning("policy file fitted on backend %s is loaded with backend %s:%s; "
                           "its margins may differ from the fit's (run `trustmargin check` "
                           "on this backend for its own policy)", fitted, kind, model)

    @property
    def decision_policy(self) -> Policy:
        """The policy this file applies."""
        return self.policy

    def apply(self, config: TrustMarginConfig | None = None) -> TrustMarginConfig:
        """``config`` (default: the paper's) with the file's policy and the numbers it takes
        (a number the policy does not take stays the config's) and, for a policy chosen on a
        chain's own answers, the scoring form they were compared under; validated."""
        base = config or TrustMarginConfig()
        update = {**self.policy.setting,
                  **({"scoring_form": self.scoring_form} if self.scoring_form else {})}
        updated = base.model_copy(update=update)
        return TrustMarginConfig.model_validate(updated.model_dump())


def _refuse_stray_fields(file: Path, data: Any) -> None:
    """A field a policy file does not have, or a number its policy does not take, refused by
    name (pydantic would say only "extra inputs are not permitted"; an unused ``tau`` beside
    ``always_rag`` must not pass as if it did something)."""
    if not isinstance(data, dict):
        return
    for name in data:
        if name not in PolicyFile.model_fields:
            raise InvalidInputError(
                f"calibration.{name}", f"{file} holds {name!r}, which is not a field of a "
                "policy file (a policy's own numbers are under `policy`)",
                f"delete {name!r}, or {_REMAKE}")
    record = data.get("policy")
    kind = record.get("kind") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(kind, str):
        return
    cls = POLICIES.get(kind)
    if cls is None:
        return  # an unknown policy: the model's own validation names it
    for name in record:
        if name != "kind" and name not in cls.numbers:
            raise InvalidInputError(
                f"calibration.policy.{name}", f"{file}: policy {kind!r} takes no {name}",
                f"delete policy.{name}, or {_REMAKE}")
    if cls.name != "rule":
        for name in FIT_FIELDS:
            if name in data:
                raise InvalidInputError(
                    f"calibration.{name}", f"{file} holds {name!r}, a number of a margin rule "
                    f"fit, beside policy {kind!r}", f"delete {name!r}, or {_REMAKE}")


def shipped_models() -> list[str]:
    """Named models with a policy file in this package."""
    folder = files("trustmargin_integrations").joinpath("policies")
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir()
                  if p.name.endswith(".json"))


def shipped_path(model: str | None) -> Path:
    """The policy file shipped for ``model`` (a named model such as qwen2.5-1.5b)."""
    available = shipped_models()
    if model not in available:
        raise InvalidInputError(
            "calibration", f"no policy file is shipped for model {model!r} (shipped: "
            f"{', '.join(available) or 'none'})",
            "use one of those models, or fit your own: `trustmargin eval --model ...` then "
            "`trustmargin calibrate RUN_DIR`")
    return Path(str(files("trustmargin_integrations").joinpath(f"policies/{model}.json")))


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


def policy_file_for(value: Any, model: str,
                    config: TrustMarginConfig | Mapping[str, Any] | None = None
                    ) -> PolicyFile | None:
    """The policy file ``TrustMargin.from_pretrained(model, config=..., calibration=value)``
    applies (None: the config as given, the paper's rule by default). Reads no model.

    - :data:`AUTO` (the default): the policy shipped for a named model (``trustmargin check``'s
      verdict for it); a model without one gets the paper's rule, and a warning is logged once
      saying the domain check should decide. A config that sets ``policy``, ``tau`` or
      ``lambda_bind`` itself keeps its own rule.
    - None: the config as given (the paper's rule unless the config says otherwise).
    - :data:`SHIPPED`, a path or a :class:`PolicyFile`: that policy file
      (:meth:`PolicyFile.coerce`).

    Raises:
        InvalidInputError: (field ``calibration``) no such file, or not a policy file,
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
            return PolicyFile.load(shipped_path(model))
        _tell_once(model)
        return None
    if not isinstance(value, str | Path | PolicyFile):
        raise InvalidInputError("calibration", f"a {type(value).__name__} is not a "
                                "policy file", f"pass {AUTO!r} (the default), None for the "
                                f"paper's rule, {SHIPPED!r}, a file path or a PolicyFile")
    return PolicyFile.coerce(value, model=model)
