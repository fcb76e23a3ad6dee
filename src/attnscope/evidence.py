"""What the claims are measured on: the inputs of one model's claims (their layout by file),
loaded into one :class:`Evidence` record, and the measurements made while loading (the
value domain of the stored maps, how much of a clue is copied from its prompt)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from attnscope import io
from attnscope.prompts import WORD_PATTERN
from attnscope.store import HEAD_MEAN, WORD_SEGMENTS, open_store, prompt_groups

SMALL_VALUE = 0.1
"""The thesis's value domain of token-level attention, [0, 0.1] (ch. 8.2)."""


@dataclass
class Evidence:
    """Everything the claims of one model are measured on (missing parts: ``None``/empty).

    - ``metrics``: head-mean rows of every variant of the reference experiment: variant,
      prompt_index, layer and the metric columns of :mod:`attnscope.metrics`;
    - ``value_domain``: trained, reference experiment, per layer: ``n_values`` (causal
      entries of the plotted token maps of all prompts) and ``n_small`` (those ≤ 0.1);
    - ``spectra``: the learned-vs-random table of :func:`attnscope.spectra.compare_learned_random`;
    - ``alignment``: the trained model's base-alignment table (:func:`attnscope.spectra.base_alignment`);
    - ``clues``: generated clues of every variant and experiment: variant, experiment,
      category, k, clue, format_ok, chrf, copy_share (:func:`copy_share`).
    """

    model: str
    experiment: str
    metrics: pd.DataFrame = field(default_factory=pd.DataFrame)
    value_domain: pd.DataFrame | None = None
    spectra: pd.DataFrame | None = None
    alignment: pd.DataFrame | None = None
    clues: pd.DataFrame | None = None

    def variants(self) -> list[str]:
        return list(dict.fromkeys(self.metrics["variant"])) if "variant" in self.metrics else []

    def layer_means(self, variant: str) -> pd.DataFrame | None:
        """Per layer, the prompt mean of every metric for ``variant`` (None if not run)."""
        rows = self.metrics[self.metrics["variant"] == variant] if "variant" in self.metrics else None
        if rows is None or rows.empty:
            return None
        numeric = rows.drop(columns=["variant", "prompt_index", "head"], errors="ignore")
        return numeric.groupby("layer").mean(numeric_only=True).sort_index()


def copy_share(clue: str, prompt_words: Iterable[str]) -> float:
    """Share of the clue's word bigrams (case-folded) that occur in the prompt's words (NaN
    for clues shorter than two words): how much of a clue is copied from its prompt."""
    words = [w.casefold() for w in prompt_words]
    prompt_bigrams = set(zip(words, words[1:]))
    clue_words = [w.casefold() for w in WORD_PATTERN.findall(clue)]
    bigrams = list(zip(clue_words, clue_words[1:]))
    if not bigrams:
        return float("nan")
    return sum(b in prompt_bigrams for b in bigrams) / len(bigrams)


def head_mean_rows(metrics: pd.DataFrame, variant: str) -> pd.DataFrame:
    """The head-mean rows of a metrics table, labelled with their variant."""
    rows = metrics[metrics["head"] == HEAD_MEAN].drop(columns=["head"])
    return rows.assign(variant=variant)


def value_domain(maps: Iterable[tuple[np.ndarray, np.ndarray]], small: float = SMALL_VALUE) -> pd.DataFrame:
    """Per layer, how many causal values of the plotted token maps there are and how many are
    ≤ ``small``: ``maps`` yields (head_mean [layer, n, n], plotted token indices) per prompt."""
    counts: dict[int, list[int]] = {}
    for head_mean, keep in maps:
        sub = np.asarray(head_mean)[:, keep][:, :, keep].astype(np.float32)
        causal = np.tril(np.ones(sub.shape[1:], bool))
        for layer, a in enumerate(sub):
            values = a[causal]
            total = counts.setdefault(layer, [0, 0])
            total[0] += values.size
            total[1] += int((values <= small).sum())
    return pd.DataFrame(
        [(layer, n, s) for layer, (n, s) in sorted(counts.items())], columns=["layer", "n_values", "n_small"]
    )


def store_value_domain(path: str | os.PathLike) -> pd.DataFrame:
    """:func:`value_domain` of every prompt of an attention store (head-mean maps over the
    tokens of :data:`attnscope.store.WORD_SEGMENTS`, the plotted ones)."""

    def maps() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for group in prompt_groups(open_store(path)):
            keep = np.flatnonzero(np.isin(group.attrs["token_segment"], WORD_SEGMENTS))
            yield group["head_mean"][...], keep

    return value_domain(maps())


def evidence_layout(
    models: Iterable[str], experiment: str, variants: Mapping[str, list[str]]
) -> dict[str, dict[str, Any]]:
    """Per model, the input files of its claims: every variant's metrics of the reference
    ``experiment``, the trained store (None without a trained variant), every variant's clues
    and every experiment's prompts (``variants``: experiment → its variants), the spectra tables."""
    layout = {}
    for model in models:
        layout[model] = {
            "experiment": experiment,
            "metrics": {
                variant: f"results/metrics/{model}/{variant}/{experiment}.parquet"
                for variant in variants[experiment]
            },
            "store": f"results/attention/{model}/trained/{experiment}.zarr"
            if "trained" in variants[experiment]
            else None,
            "clues": [
                [variant, exp, f"results/clues/{model}/{variant}/{exp}.parquet"]
                for exp in variants
                for variant in variants[exp]
            ],
            "prompts": {exp: f"results/prompts/{model}/{exp}.parquet" for exp in variants},
            "spectra": f"results/spectra/{model}/learned_vs_random.parquet",
            "alignment": f"results/spectra/{model}/trained_alignment.parquet",
        }
    return layout


def evidence_files(layout: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """The files of an :func:`evidence_layout`, by kind (a rule's named inputs)."""
    files: dict[str, list[str]] = {kind: [] for kind in ("metrics", "store", "clues", "prompts", "spectra")}
    for entry in layout.values():
        files["metrics"] += list(entry["metrics"].values())
        files["store"] += [entry["store"]] if entry["store"] else []
        files["clues"] += [path for _, _, path in entry["clues"]]
        files["prompts"] += list(entry["prompts"].values())
        files["spectra"] += [entry["spectra"], entry["alignment"]]
    return files


def load_evidence(model: str, entry: Mapping[str, Any]) -> Evidence:
    """The :class:`Evidence` of one model from the files of its :func:`evidence_layout` entry."""
    metrics = pd.concat(
        [head_mean_rows(pd.read_parquet(path), variant) for variant, path in entry["metrics"].items()],
        ignore_index=True,
    )
    prompts = {exp: pd.read_parquet(path).set_index("prompt_index") for exp, path in entry["prompts"].items()}
    clue_frames = []
    for variant, exp, path in entry["clues"]:
        clues = pd.read_parquet(path)
        words = prompts[exp].loc[clues["prompt_index"], "words"]
        clues["copy_share"] = [copy_share(c, w) for c, w in zip(clues["clue"], words)]
        clue_frames.append(clues.assign(variant=variant, experiment=exp))
    return Evidence(
        model=model,
        experiment=entry["experiment"],
        metrics=metrics,
        value_domain=store_value_domain(entry["store"]) if entry["store"] else None,
        spectra=pd.read_parquet(entry["spectra"]),
        alignment=pd.read_parquet(entry["alignment"]),
        clues=pd.concat(clue_frames, ignore_index=True),
    )


def input_digests(paths: Iterable[str]) -> dict[str, str]:
    """The config digest recorded in each input (a store's attributes or a Parquet's metadata)."""
    return {
        path: open_store(path).attrs["config_digest"]
        if path.endswith(".zarr")
        else io.read_parquet_metadata(path)["config_digest"]
        for path in paths
    }
