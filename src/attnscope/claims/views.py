"""The claims' views of the evidence: per-prompt tables of per-layer metrics (the rows the
cluster bootstrap resamples), paired differences between variants, layer bands, and the
variants a claim picks."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from attnscope import stats
from attnscope import variants as variant_names
from attnscope.effects import PROMPT_KEYS
from attnscope.stats import Interval

THESIS_CHOICE = "words"
"""The thesis's analysis choice (ch. 8.2): "I chose to plot only the attention scores that address
the words and clues; therefore, they do not sum to 1" (keys and queries restricted to them, rows
as the model computed them, not renormalised)."""
DEFAULT_BANDS: tuple[str | int, ...] = ("thirds", 3, 5)
"""``claims.bands``: the layers split into thirds, or the first/last n layers against the rest."""


def band_name(band: str | int) -> str:
    return "thirds" if band == "thirds" else f"first/last {band}"


def layer_bands(num_layers: int, band: str | int) -> dict[str, np.ndarray]:
    """Early, middle and late layers: thirds (three near-equal parts), or the first and last
    ``band`` layers with the rest as the middle."""
    layers = np.arange(num_layers)
    if band == "thirds":
        return dict(zip(("early", "middle", "late"), np.array_split(layers, 3)))
    n = min(int(band), num_layers // 3)
    return {"early": layers[:n], "middle": layers[n : num_layers - n], "late": layers[num_layers - n :]}


def band_mean(means: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """The mean over ``layers`` of per-layer means [..., layer] (NaN for an empty band)."""
    if not len(layers):
        return np.full(means.shape[:-1], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a band with no value in a resample
        return np.nanmean(means[..., layers], axis=-1)


@dataclass(frozen=True)
class PromptTable:
    """Per prompt (a row per variant × replicate × prompt), one or more metrics per layer."""

    values: np.ndarray  # [prompt, metric × layer]
    targets: np.ndarray  # [prompt], the resampling clusters
    num_layers: int
    n_seeds: int
    index: pd.Index | None = None  # (experiment, prompt_index, target) of each row

    def interval(self, statistic: Callable[[np.ndarray], np.ndarray]) -> Interval:
        """``statistic`` of the per-layer means [..., metric, layer], clustered by target."""
        layers = self.num_layers

        def of_columns(means: np.ndarray) -> np.ndarray:
            return statistic(means.reshape(*means.shape[:-1], -1, layers))

        return stats.cluster_interval(self.values, self.targets, of_columns)

    def draws(self) -> list[tuple[str, PromptTable]]:
        """The table of each shot draw (experiment), in the table's order."""
        experiments = self.index.get_level_values("experiment")
        return [
            (
                name,
                replace(
                    self,
                    values=self.values[rows],
                    targets=self.targets[rows],
                    n_seeds=1,
                    index=self.index[rows],
                ),
            )
            for name in dict.fromkeys(experiments)
            for rows in [np.asarray(experiments == name)]
        ]


PROMPT_TARGET_KEYS = [*PROMPT_KEYS, "target"]
"""A prompt's keys and its target word, the cluster the bootstrap resamples."""


_BUILT: ContextVar[dict[tuple, tuple[pd.DataFrame, PromptTable | None]] | None] = ContextVar(
    "prompt_tables", default=None
)


@contextmanager
def built_once() -> Iterator[None]:
    """Inside the block each :func:`prompt_table` is built once (one evaluation's settings, e.g.
    its layer bands, read the same tables; a table is read, never changed)."""
    token = _BUILT.set({})
    try:
        yield
    finally:
        _BUILT.reset(token)


def prompt_table(
    table: pd.DataFrame, variants: Sequence[str], metrics: Sequence[str], choice: str | None = None
) -> PromptTable | None:
    """The rows of ``variants`` (under ``choice``) as a :class:`PromptTable` of ``metrics``
    (inside :func:`built_once`, built once per table and arguments)."""
    built = _BUILT.get()
    if built is None:
        return _prompt_table(table, variants, metrics, choice)
    key = (id(table), tuple(variants), tuple(metrics), choice)
    if key not in built:  # the frame is kept with its table, so its id is not reused meanwhile
        built[key] = (table, _prompt_table(table, variants, metrics, choice))
    return built[key][1]


def _prompt_table(
    table: pd.DataFrame, variants: Sequence[str], metrics: Sequence[str], choice: str | None
) -> PromptTable | None:
    rows = table[table["variant"].isin(variants)] if "variant" in table else table.iloc[:0]
    if choice is not None and len(rows):
        rows = rows[rows["choice"] == choice]
    if rows.empty:
        return None
    wide = (
        rows.set_index(["variant", *PROMPT_TARGET_KEYS, "layer"])[list(metrics)].unstack("layer").sort_index()
    )
    num_layers = wide.columns.get_level_values("layer").nunique()
    seeds = rows.drop_duplicates(["variant", "seed"])
    return PromptTable(
        wide.to_numpy(np.float64),
        wide.index.get_level_values("target").to_numpy(),
        num_layers,
        len(seeds),
        wide.index.droplevel("variant"),
    )


def paired_table(
    table: pd.DataFrame, variant: str, metrics: Sequence[str], choice: str | None
) -> PromptTable | None:
    """``variant`` − trained, paired per replicate, prompt and layer (the prompts both ran)."""
    edited = prompt_table(table, [variant], metrics, choice)
    trained = prompt_table(table, ["trained"], metrics, choice)
    if edited is None or trained is None or edited.num_layers != trained.num_layers:
        return None
    common = edited.index.intersection(trained.index)
    if not len(common):
        return None
    rows = edited.index.get_indexer(common), trained.index.get_indexer(common)
    return PromptTable(
        edited.values[rows[0]] - trained.values[rows[1]],
        common.get_level_values("target").to_numpy(),
        edited.num_layers,
        edited.n_seeds,
        common,
    )


def pick_variant(
    names: Iterable[str], kind: str, direction: str | None = None, target: float | None = None
) -> str | None:
    """The run's variant of ``kind`` (all layers edited): for ``qkscale`` the α > 1 (``up``) or
    α < 1 (``down``) edit closest to ``target`` (the thesis's 2 and ½)."""
    candidates = []
    for name in names:
        v = variant_names.parse(name)
        if v.kind != kind or v.layers is not None:
            continue
        if (
            direction == "up"
            and not (v.alpha and v.alpha > 1)
            or direction == "down"
            and not (v.alpha and v.alpha < 1)
        ):
            continue
        distance = abs(np.log(v.alpha / target)) if target and v.alpha else 0.0
        candidates.append((distance, name))
    return min(candidates)[1] if candidates else None
