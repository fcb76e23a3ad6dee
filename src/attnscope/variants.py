"""Model variants (ablations): deterministic weight edits applied at load time.

The variant is named in every output path (the ``{variant}`` wildcard):

- ``trained``: the model as loaded.
- ``random-s{seed}``: same config, freshly initialised with the model's own init
  scheme under ``torch.manual_seed(seed)`` (the thesis's "initial randomized model").
- ``qkscale-a{alpha}``: the attention logits scaled by alpha² (fig. 8.8, 8.9): every layer's
  W_q and W_k (and their biases, where the family has them) multiplied by alpha, i.e. all their
  singular values scaled by alpha; on a
  QK-norm model (Gemma 3: an RMSNorm on each head's q and k after W_q, W_k, which would
  cancel that scale) the gains that q_norm and k_norm apply are multiplied by alpha instead.
- ``qktop-r{r}-a{alpha}``: only the top-r singular values of W_q and W_k scaled by
  alpha, the rest of each spectrum and all singular vectors kept. Refused on a QK-norm
  model: its norms reset each q and k to unit RMS, so the scale this edit gives the top
  directions does not reach the logits.
- ``qkflat``: W_q's and W_k's spectra flattened to their root-mean-square value, at
  equal Frobenius norm (same Σσ², no dominant directions). On a QK-norm model the
  flattened shape reaches the logits, the Frobenius norm does not.

The three W_q/W_k edits take a layer range suffix ``-L{first}-{last}`` (0-based,
inclusive), e.g. ``qkscale-a2-L0-9``; without it they edit every layer.

- ``knockout-{edges}-L{first}-{last}``: no weight edit; attention along an edge set blocked at
  run time in the layers first … last (:mod:`attnscope.knockout`, which names the edge sets),
  e.g. ``knockout-target-shotwords-L0-5``. ``knockout-control-{edges}-s{seed}-L{first}-{last}``
  blocks the matched random control of the set (as many keys per query row, drawn with ``seed``);
  ``-s{first}-{last}`` names the seeds first … last, run in one job. The layer range is required
  and non-empty. :func:`knockout_plan` lists the knockouts that a config's
  ``knockout:`` makes (edge sets × layer windows).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnscope import architecture

if TYPE_CHECKING:  # torch is imported inside the edits so the Snakefile parses variant names fast
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)"
_RANGE = r"-L(?P<first>\d+)-(?P<last>\d+)"
_LAYERS = rf"(?:{_RANGE})?"
# The edge sets of a knockout (attnscope.knockout builds them; kept here so names parse without torch).
EDGE_SETS = (
    "target-shots",
    "target-shotwords",
    "target-shotclues",
    "target-instruction",
    "across-shots",
    "clue-ownword",
)
TARGET_SHOTS, TARGET_SHOTWORDS, TARGET_SHOTCLUES, TARGET_INSTRUCTION, ACROSS_SHOTS, CLUE_OWNWORD = EDGE_SETS
KNOCKOUT_CLUES = {"": "the trained model's greedy clue", "reference_": "the reference clue"}
"""The clues a knockout job scores under teacher forcing, by the prefix of their columns."""
_EDGES = "|".join(EDGE_SETS)
PATTERNS = {
    "trained": re.compile(r"trained"),
    "random": re.compile(r"random-s(?P<seed>\d+)"),
    "qkscale": re.compile(rf"qkscale-a(?P<alpha>{_NUMBER}){_LAYERS}"),
    "qktop": re.compile(rf"qktop-r(?P<rank>\d+)-a(?P<alpha>{_NUMBER}){_LAYERS}"),
    "qkflat": re.compile(rf"qkflat{_LAYERS}"),
    "knockout": re.compile(
        rf"knockout-(?:(?P<edges>{_EDGES})|control-(?P<control>{_EDGES})-s(?P<seed>\d+)(?:-(?P<seed_last>\d+))?)"
        rf"{_RANGE}"
    ),
}
# For the Snakefile's wildcard_constraints: the same forms, without named groups.
WILDCARD_REGEX = "|".join(re.sub(r"\(\?P<\w+>", "(?:", p.pattern) for p in PATTERNS.values())
VARIANT_FORMS = (
    "trained, random-s<seed> (e.g. random-s0), qkscale-a<alpha> (e.g. qkscale-a2, qkscale-a0.5), "
    "qktop-r<r>-a<alpha> (e.g. qktop-r8-a2), qkflat; the last three optionally with a layer range "
    "-L<first>-<last> (e.g. qkscale-a2-L0-9); knockout-<edges>-L<first>-<last> (e.g. "
    "knockout-target-shotwords-L0-5) and its random control knockout-control-<edges>-s<seed>-L<first>-<last> "
    "or, for the seeds first … last in one job, knockout-control-<edges>-s<first>-<last>-L<first>-<last> "
    f"(e.g. knockout-control-target-shotwords-s0-4-L0-5), <edges> one of {', '.join(EDGE_SETS)}"
)
"""The forms of a variant name, as the error for a name of none of them lists them."""

CONTROL_PREFIX = "control-"
EDGE_CHOICES = (*EDGE_SETS, *(CONTROL_PREFIX + e for e in EDGE_SETS))
"""What ``knockout.edges`` lists: a named edge set, or ``control-<set>``, its random control."""

# A negative alpha (qkscale-a-1) matches no form; say what is wrong rather than "unknown variant".
_ALPHA = "variant {name!r}: alpha must be > 0 (e.g. qkscale-a2 doubles W_q and W_k, qkscale-a0.5 halves them)"
_NEGATIVE_ALPHA = re.compile(rf"(?:qkscale|qktop-r\d+)-a-{_NUMBER}{_LAYERS}")


@dataclass(frozen=True)
class Variant:
    """A parsed variant name."""

    name: str
    kind: str
    seed: int | None = None
    alpha: float | None = None
    rank: int | None = None
    layers: tuple[int, int] | None = None
    edges: str | None = None
    control: bool = False
    seeds: tuple[int, ...] = ()
    """A knockout control's seeds (one job draws each); ``seed`` is the first."""

    @property
    def edits_weights(self) -> bool:
        return self.kind not in ("trained", "knockout")

    @property
    def edits_attention(self) -> bool:
        """Whether the variant edits W_q, W_k (or the QK-norm gains): :func:`apply_edit` acts on it."""
        return self.kind in ("qkscale", "qktop", "qkflat")

    @property
    def knocks_out(self) -> bool:
        """Whether the variant blocks attention edges at run time (weights as trained)."""
        return self.kind == "knockout"

    def edits_layer(self, layer: int) -> bool:
        return self.layers is None or self.layers[0] <= layer <= self.layers[1]


def parse(name: str) -> Variant:
    """Parse a variant name; a clear ``ValueError`` names the accepted forms."""
    for kind, pattern in PATTERNS.items():
        match = pattern.fullmatch(name)
        if match is None:
            continue
        groups = {k: v for k, v in match.groupdict().items() if v is not None}
        alpha = float(groups["alpha"]) if "alpha" in groups else None
        if alpha is not None and alpha <= 0:
            raise ValueError(_ALPHA.format(name=name))
        rank = int(groups["rank"]) if "rank" in groups else None
        if rank is not None and rank < 1:
            raise ValueError(f"variant {name!r}: r must be >= 1")
        layers = (int(groups["first"]), int(groups["last"])) if "first" in groups else None
        if layers is not None and layers[0] > layers[1]:
            raise ValueError(f"variant {name!r}: layer range L{layers[0]}-{layers[1]} is empty")
        seed = int(groups["seed"]) if "seed" in groups else None
        seeds = () if seed is None else tuple(range(seed, int(groups.get("seed_last", seed)) + 1))
        if seed is not None and not seeds:
            raise ValueError(f"variant {name!r}: seed range s{seed}-{groups['seed_last']} is empty")
        edges = groups.get("edges", groups.get("control"))
        return Variant(
            name,
            kind,
            seed=seed,
            alpha=alpha,
            rank=rank,
            layers=layers,
            edges=edges,
            control="control" in groups,
            seeds=seeds,
        )
    if _NEGATIVE_ALPHA.fullmatch(name):
        raise ValueError(_ALPHA.format(name=name))
    raise ValueError(f"unknown variant {name!r}; expected one of: {VARIANT_FORMS}")


def random_variants(names: Iterable[str]) -> list[str]:
    """Every random-init variant (random-s<seed>) of ``names``: their seeds are replicates of one
    init, so the claims, the evidence and the spectra figures take them together."""
    return [n for n in names if parse(n).kind == "random"]


def windows(options: Mapping[str, Any], num_layers: int) -> list[tuple[int, int]]:
    """The layer windows (first, last; 0-based, inclusive) of ``knockout:`` on a model of
    ``num_layers`` layers: ``windows`` as listed, else windows of ``window`` layers every
    ``stride`` layers from layer 0, the last one ending at the last layer."""
    if options.get("windows"):
        for i, (first, last) in enumerate(options["windows"]):
            if not 0 <= first <= last < num_layers:
                raise ValueError(
                    f"knockout.windows[{i}]: [{first}, {last}] is not a layer range of a model with "
                    f"layers 0-{num_layers - 1}"
                )
        return [(int(a), int(b)) for a, b in options["windows"]]
    width = min(int(options["window"]), num_layers)
    stride = int(options["stride"] or width)
    found = [(a, a + width - 1) for a in range(0, num_layers - width + 1, stride)]
    if found[-1][1] != num_layers - 1:
        found.append((num_layers - width, num_layers - 1))
    return found


def knockout_name(edges: str, seeds: int, window: tuple[int, int]) -> str:
    """The variant name of one ``knockout.edges`` entry in ``window``: a control draws ``seeds``
    seeds, 0 … seeds − 1, in one job."""
    if not edges.startswith(CONTROL_PREFIX):
        name = f"knockout-{edges}"
    elif seeds < 1:
        raise ValueError(f"knockout.control_seeds: {seeds}; a control needs at least one seed")
    else:
        name = f"knockout-{edges}-{'s0' if seeds == 1 else f's0-{seeds - 1}'}"
    first, last = window
    return f"{name}-L{first}-{last}"


KNOCKOUT_SET_REGEX = re.sub(r"\(\?P<\w+>", "(?:", PATTERNS["knockout"].pattern.removesuffix(_RANGE))
"""A knockout's name without its window (:func:`knockout_sets`), for the Snakefile's wildcard_constraints."""


def knockout_sets(names: Sequence[str]) -> dict[str, list[str]]:
    """Knockout variant names grouped by their name without the window (``knockout-{edges}``, a
    control's with its seeds: one ``knockout.edges`` entry), in their order: the knockouts one job
    runs together, sharing the unchanged model's passes (:func:`attnscope.knockout.prompt_effects`)."""
    sets: dict[str, list[str]] = {}
    for name in names:
        match = PATTERNS["knockout"].fullmatch(name)
        if match is None or match["first"] is None:
            raise ValueError(f"{name!r} is not a knockout with a layer window")
        sets.setdefault(name[: match.start("first") - 2], []).append(name)
    return sets


def knockout_runs(names: Sequence[str]) -> int:
    """How many knockout runs ``names`` make: one per window, a control's once per seed (a job's
    runtime scales with it)."""
    return sum(max(1, len(parse(name).seeds)) for name in names)


def knockout_variants(options: Mapping[str, Any], num_layers: int) -> list[str]:
    """Every knockout of ``knockout:`` on a model of ``num_layers`` layers (edge set × window)."""
    for i, edges in enumerate(options["edges"]):
        if edges not in EDGE_CHOICES:
            raise ValueError(f"knockout.edges[{i}]: {edges!r} is none of {', '.join(EDGE_CHOICES)}")
    return [
        knockout_name(edges, options["control_seeds"], window)
        for edges in options["edges"]
        for window in windows(options, num_layers)
    ]


def knockout_plan(
    options: Mapping[str, Any],
    layers: Mapping[str, int],
    experiments: Sequence[str],
    claims_experiments: Sequence[str],
) -> dict[str, dict[str, list[str]]]:
    """Model → experiment → its knockouts: ``knockout.experiments`` (default: the claims
    experiments) × :func:`knockout_variants` on each model's ``layers``."""
    chosen = claims_experiments if options["experiments"] is None else options["experiments"]
    unknown = [name for name in chosen if name not in experiments]
    if unknown:
        raise ValueError(
            f"knockout.experiments: no experiment {unknown} (experiments: {', '.join(experiments)})"
        )
    return {
        model: {name: knockout_variants(options, count) for name in chosen} for model, count in layers.items()
    }


def random_init(config: PretrainedConfig, seed: int, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """A freshly initialised model of ``config`` (its own init scheme), seeded, on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return model if dtype is None else model.to(dtype)


def check_layers(variant: Variant, num_layers: int) -> None:
    """A layer range must lie inside the model."""
    if variant.layers is not None and variant.layers[1] >= num_layers:
        raise ValueError(f"variant {variant.name!r}: the model has layers 0-{num_layers - 1}")


def apply_edit(model: PreTrainedModel, variant: Variant) -> None:
    """Apply the variant's weight edit in place (``trained``/``random``: none): to W_q and W_k,
    or, for ``qkscale`` on a QK-norm model, to the gains of q_norm and k_norm (see the module
    docstring); an edit without meaning for the architecture is refused."""
    import torch

    if not variant.edits_attention:
        return
    decoder = architecture.require(model.config, "weight edits")
    check_layers(variant, model.config.num_hidden_layers)
    if variant.kind == "qktop" and decoder.qk_norm is not None:
        raise ValueError(
            f"variant {variant.name!r}: not defined for {model.config.model_type}, whose q_norm and k_norm "
            "(RMSNorm on each head's queries and keys) reset the scale that qktop gives the top singular "
            "directions of W_q, W_k before it reaches the logits; use qkscale-a<alpha> (scales the norms' "
            "gains) or qkflat"
        )
    with torch.no_grad():
        for layer, block in enumerate(architecture.decoder_layers(model)):
            if not variant.edits_layer(layer):
                continue
            norms = decoder.qk_norms(getattr(block, decoder.attention))
            if variant.kind == "qkscale" and norms is not None:
                for norm in norms:
                    decoder.set_applied_gain(norm, decoder.applied_gain(norm) * variant.alpha)
                continue
            for matrix in ("q", "k"):
                weight = decoder.parameter(block, matrix, model.config)
                decoder.set_parameter(block, matrix, model.config, edited(weight, variant))
                bias = decoder.parameter(block, matrix, model.config, "bias")
                if bias is not None and variant.kind == "qkscale":
                    decoder.set_parameter(block, matrix, model.config, bias * variant.alpha, "bias")


def edited(weight: torch.Tensor, variant: Variant) -> torch.Tensor:
    """W [out, in] with its spectrum edited: ``qkscale`` αW (its bias is scaled with it: W x + b →
    α(W x + b), so every logit term is α²); ``qktop`` the top-r singular values × α; ``qkflat`` every
    singular value the RMS. qktop and qkflat keep the bias (it adds no singular values)."""
    import torch

    if variant.kind == "qkscale":
        return weight * variant.alpha
    u, sigma, vh = torch.linalg.svd(weight.detach().to("cpu", torch.float64), full_matrices=False)
    if variant.kind == "qktop":
        sigma[: variant.rank] *= variant.alpha
    else:  # qkflat: every singular value becomes the RMS, so Σσ² (the Frobenius norm) is unchanged
        sigma = torch.full_like(sigma, float(sigma.square().mean().sqrt()))
    return ((u * sigma) @ vh).to(weight.device)
