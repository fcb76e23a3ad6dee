"""Model variants (ablations): deterministic weight edits applied at load time.

The variant is named in every output path (the ``{variant}`` wildcard):

- ``trained``: the model as loaded.
- ``random-s{seed}``: same config, freshly initialised with the model's own init
  scheme under ``torch.manual_seed(seed)`` (the thesis's "initial randomized model").
- ``qkscale-a{alpha}``: every layer's W_q and W_k multiplied by alpha, i.e. all their
  singular values scaled by alpha and the attention logits by alpha².
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported inside the edits so the Snakefile parses variant names fast
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)"
PATTERNS = {
    "trained": re.compile(r"trained"),
    "random": re.compile(r"random-s(?P<seed>\d+)"),
    "qkscale": re.compile(rf"qkscale-a(?P<alpha>{_NUMBER})"),
}
# For the Snakefile's wildcard_constraints.
WILDCARD_REGEX = "|".join(
    p.pattern.replace("(?P<seed>", "(?:").replace("(?P<alpha>", "(?:") for p in PATTERNS.values()
)


@dataclass(frozen=True)
class Variant:
    """A parsed variant name."""

    name: str
    kind: str
    seed: int | None = None
    alpha: float | None = None

    @property
    def edits_weights(self) -> bool:
        return self.kind != "trained"


def parse(name: str) -> Variant:
    """Parse a variant name; a clear ``ValueError`` names the accepted forms."""
    for kind, pattern in PATTERNS.items():
        match = pattern.fullmatch(name)
        if match is None:
            continue
        groups = match.groupdict()
        if kind == "random":
            return Variant(name, kind, seed=int(groups["seed"]))
        if kind == "qkscale":
            alpha = float(groups["alpha"])
            if alpha <= 0:
                raise ValueError(f"variant {name!r}: alpha must be > 0")
            return Variant(name, kind, alpha=alpha)
        return Variant(name, kind)
    raise ValueError(
        f"unknown variant {name!r}; expected one of: trained, random-s<seed> (e.g. random-s0), "
        "qkscale-a<alpha> (e.g. qkscale-a2, qkscale-a0.5)"
    )


def random_init(config: PretrainedConfig, seed: int, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """A freshly initialised model of ``config`` (its own init scheme), seeded, on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return model if dtype is None else model.to(dtype)


def attention_modules(model: PreTrainedModel) -> list[torch.nn.Module]:
    """The self-attention module of every layer (``blocks.{l}.attn``)."""
    return [layer.self_attn for layer in model.model.layers]


def apply_edit(model: PreTrainedModel, variant: Variant) -> None:
    """Apply the variant's weight edit in place (``trained``/``random`` need none here)."""
    import torch

    with torch.no_grad():
        _apply_edit(model, variant)


def _apply_edit(model: PreTrainedModel, variant: Variant) -> None:
    if variant.kind == "qkscale":
        for attn in attention_modules(model):
            for proj in (attn.q_proj, attn.k_proj):
                proj.weight.mul_(variant.alpha)
                if proj.bias is not None:
                    proj.bias.mul_(variant.alpha)
