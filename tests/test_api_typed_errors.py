"""Bad arguments to the public API are typed errors naming the argument:
before, each of these raised a raw TypeError, AttributeError or RuntimeError."""

from __future__ import annotations

from typing import Any

import pytest

from trustmargin_integrations import BM25Index, Passage, TrustMargin, TrustMarginConfig
from trustmargin_integrations.backends.hf.backend import pick_device
from trustmargin_integrations.backends.loading import load_backend
from trustmargin_integrations.errors import InvalidInputError


@pytest.mark.parametrize("bad", [None, 3, "a question", {"question": "q"}])
def test_a_batch_that_is_not_a_list_of_inputs(tm: TrustMargin, bad: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"^inputs: must be a list of inputs"):
        tm.arbitrate_batch(bad)


def test_index_only_passages() -> None:
    with pytest.raises(InvalidInputError, match=r"^passages\[1\]: is a NoneType, not a Passage"):
        BM25Index.build(
            [Passage(id="a", title="", text="Some real text."), None])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match=r"^passages: must be a list"):
        BM25Index.build("just text")  # type: ignore[arg-type]


@pytest.mark.parametrize("model", [None, "", 7])
def test_a_model_must_be_named(model: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"^model: must be a model name"):
        load_backend(model)
    with pytest.raises(InvalidInputError, match=r"^model:"):
        TrustMargin.from_pretrained(model)


@pytest.mark.parametrize(("device", "problem"), [("banana", "is not a device name"),
                                                 ("cuda:3", "is not available")])
def test_a_device_this_machine_lacks(device: str, problem: str) -> None:
    with pytest.raises(InvalidInputError, match=rf"^device: '{device}' {problem}"):
        pick_device(device)


def test_the_arbiter_takes_a_backend_and_a_config_or_its_fields(tm: TrustMargin) -> None:
    with pytest.raises(InvalidInputError, match=r"^backend: a NoneType is not a Backend"):
        TrustMargin(None)  # type: ignore[arg-type]
    assert TrustMargin(tm.backend, config={"tau": -2.0}).config == TrustMarginConfig(tau=-2.0)
    with pytest.raises(InvalidInputError, match=r"^tau:"):
        TrustMargin(tm.backend, config={"tau": float("nan")})
    with pytest.raises(InvalidInputError, match=r"^config: a list is not a config"):
        TrustMargin(tm.backend, config=[])  # type: ignore[arg-type]
