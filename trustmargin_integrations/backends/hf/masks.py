"""4D attention masks handed to the model as they are (the tree-masked scoring pass, the
static-cache decode step): boolean for SDPA, additive for kernels such as eager attention."""

from __future__ import annotations

from typing import Any

import torch


def uses_bool_masks(model: Any) -> bool:
    """True when the attention kernel (SDPA) takes a boolean 4D mask as it is."""
    return getattr(model.config, "_attn_implementation", "sdpa") == "sdpa"


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive form of a boolean mask (0 where allowed, the dtype's minimum elsewhere),
    for kernels such as eager attention."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)


def model_mask(model: Any, allowed: torch.Tensor) -> torch.Tensor:
    """``allowed`` (True where a query may attend) in the form the model's kernel takes."""
    return allowed if uses_bool_masks(model) else additive_mask(allowed, model.dtype)


def open_value(mask: torch.Tensor) -> bool | float:
    """The value that marks a position as visible in a mask made by :func:`model_mask`."""
    return True if mask.dtype == torch.bool else 0.0
