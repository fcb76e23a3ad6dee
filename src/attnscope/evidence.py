"""What the claims are measured on: the inputs of one model's claims (their layout by file),
loaded into one :class:`Evidence` record, and the one measurement made while loading (how
much of a clue is copied from its prompt)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from attnscope import io, paths
from attnscope import variants as variant_names
from attnscope.prompts import WORD_PATTERN
from attnscope.store import WEIGHTS


@dataclass
class Evidence:
    """Everything the claims of one model are measured on (missing parts: empty tables/None).

    Attention tables hold every variant and shot-seed replicate of the reference experiment,
    labelled ``variant``, ``experiment`` (the replicate) and ``seed``, with ``prompt_index``
    and ``target`` (the resampling unit of every interval):

    - ``choices``: head-mean maps per prompt × layer × analysis ``choice`` (the
      ``.choices.parquet`` tables of :mod:`attnscope.choices`);
    - ``metrics``: the metrics tables, head-mean rows (``head`` −1) and every head (the
      embedding-cosine correlations);
    - ``value_choices``, ``value_metrics``: the same of the value-weighted maps
      (:meth:`weighted` measures a claim on them);
    - ``spectra``: variant → its spectra table (trained and the random seeds);
    - ``alignment``: variant → its base-alignment table (trained and the random seeds);
    - ``clues``: generated clues of every variant and experiment: variant, experiment, seed,
      category, k, target, prompt_index, clue, format_ok, chrf, copy_share (:func:`copy_share`);
    - ``knockout``: per prompt, what each knockout does to the trained clue (knockout jobs of the
      reference experiments: :func:`attnscope.knockout.prompt_effects`);
    - ``description``: what the model is (its manifest: architecture, size, notes);
    - ``thesis_model``: whether this is the thesis's own model (Mistral-7B).
    """

    model: str
    experiment: str
    choices: pd.DataFrame = field(default_factory=pd.DataFrame)
    metrics: pd.DataFrame = field(default_factory=pd.DataFrame)
    value_choices: pd.DataFrame = field(default_factory=pd.DataFrame)
    value_metrics: pd.DataFrame = field(default_factory=pd.DataFrame)
    spectra: dict[str, pd.DataFrame] = field(default_factory=dict)
    alignment: dict[str, pd.DataFrame] = field(default_factory=dict)
    clues: pd.DataFrame | None = None
    knockout: pd.DataFrame = field(default_factory=pd.DataFrame)
    description: str = ""
    thesis_model: bool = False
    replicates: list[str] = field(default_factory=list)
    """The reference experiment's shot-seed replicates (experiment names; default: itself)."""

    def __post_init__(self) -> None:
        self.replicates = self.replicates or [self.experiment]

    def variants(self) -> list[str]:
        return list(dict.fromkeys(self.choices["variant"])) if "variant" in self.choices else []

    def weighted(self, weighting: str) -> Evidence:
        """This evidence with the maps' tables of ``weighting`` (:data:`attnscope.store.WEIGHTINGS`)
        as ``choices`` and ``metrics``, so every attention claim measures them unchanged."""
        if weighting == WEIGHTS:
            return self
        return replace(self, choices=self.value_choices, metrics=self.value_metrics)


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


def _labelled(table: pd.DataFrame, variant: str, experiment: str, seed: int) -> pd.DataFrame:
    return table.assign(variant=variant, experiment=experiment, seed=seed)


def evidence_layout(
    models: Iterable[str],
    experiments: Sequence[str],
    runs: Mapping[str, Mapping[str, Any]],
    spectra_variants: Iterable[str],
    thesis_models: Iterable[str] = (),
    knockouts: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per model, the input files of its claims. ``experiments`` are the reference experiments
    (config names, pooled); ``runs`` maps every experiment of the run to its ``variants``,
    ``seed`` and ``replicate_group`` (the config name its shot-seed replicates share);
    ``knockouts``: model → experiment → its knockout variants (those of the reference
    experiments' draws are read, from one file per edge set)."""
    replicates = [name for name, e in runs.items() if e["replicate_group"] in experiments]
    randoms = variant_names.random_variants(spectra_variants)

    def per_variant(model: str, pattern: str) -> list[list[str]]:
        return [
            [variant, name, pattern.format(model=model, variant=variant, experiment=name)]
            for name in replicates
            for variant in runs[name]["variants"]
        ]

    layout = {}
    for model in models:
        layout[model] = {
            "experiment": " + ".join(experiments),
            "seeds": {name: e["seed"] for name, e in runs.items()},
            "metrics": per_variant(model, paths.METRICS),
            "choices": per_variant(model, paths.CHOICES),
            "value_metrics": per_variant(model, paths.VALUE_METRICS),
            "value_choices": per_variant(model, paths.VALUE_CHOICES),
            "clues": [
                [variant, name, paths.CLUES.format(model=model, variant=variant, experiment=name)]
                for name, e in runs.items()
                for variant in e["variants"]
            ],
            "prompts": {name: paths.PROMPTS.format(model=model, experiment=name) for name in runs},
            "spectra": {v: paths.SPECTRA.format(model=model, variant=v) for v in ["trained", *randoms]},
            "alignment": {v: paths.ALIGNMENT.format(model=model, variant=v) for v in ["trained", *randoms]},
            "manifest": paths.MANIFEST.format(model=model),
            "thesis_model": model in set(thesis_models),
            "knockout": [
                [group, name, paths.KNOCKOUT.format(model=model, knockouts=group, experiment=name)]
                for name, names in (knockouts or {}).get(model, {}).items()
                if name in replicates
                for group in variant_names.knockout_sets(names)
            ],
        }
    return layout


def evidence_files(layout: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """The files of an :func:`evidence_layout`, by kind (a rule's named inputs)."""
    tables = ("metrics", "choices", "value_metrics", "value_choices", "clues", "knockout")
    kinds = (*tables, "prompts", "spectra", "manifest")
    files: dict[str, list[str]] = {kind: [] for kind in kinds}
    for entry in layout.values():
        for kind in tables:
            files[kind] += [path for _, _, path in entry[kind]]
        files["prompts"] += list(entry["prompts"].values())
        files["spectra"] += [*entry["spectra"].values(), *entry["alignment"].values()]
        files["manifest"].append(entry["manifest"])
    return files


def model_description(manifest: Mapping[str, Any]) -> str:
    """What a prepared model is, from its manifest: architecture, size, and its notes."""
    size = manifest["num_parameters"] / 1e6
    text = f"{manifest['architecture']}, {size:,.1f} M parameters, {manifest['num_layers']} layers"
    return "; ".join([text, *manifest.get("notes", [])])


def load_evidence(model: str, entry: Mapping[str, Any]) -> Evidence:
    """The :class:`Evidence` of one model from the files of its :func:`evidence_layout` entry."""
    seeds = entry["seeds"]

    def tables(kind: str, keep: Callable[[pd.DataFrame], pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(
            [
                _labelled(keep(pd.read_parquet(path)), variant, name, seeds[name])
                for variant, name, path in entry[kind]
            ],
            ignore_index=True,
        )

    metrics = tables("metrics", lambda t: t)
    prompts = {
        name: pd.read_parquet(path).set_index("prompt_index") for name, path in entry["prompts"].items()
    }
    clue_frames = []
    for variant, name, path in entry["clues"]:
        clues = pd.read_parquet(path)
        words = prompts[name].loc[clues["prompt_index"], "words"]
        clues["copy_share"] = [copy_share(c, w) for c, w in zip(clues["clue"], words)]
        clue_frames.append(_labelled(clues, variant, name, seeds[name]))
    with open(entry["manifest"], encoding="utf-8") as f:
        manifest = json.load(f)
    return Evidence(
        model=model,
        experiment=entry["experiment"],
        choices=tables("choices", lambda t: t),
        metrics=metrics,
        value_choices=tables("value_choices", lambda t: t),
        value_metrics=tables("value_metrics", lambda t: t),
        spectra={variant: pd.read_parquet(path) for variant, path in entry["spectra"].items()},
        alignment={variant: pd.read_parquet(path) for variant, path in entry["alignment"].items()},
        clues=pd.concat(clue_frames, ignore_index=True),
        knockout=pd.concat([pd.read_parquet(path) for _, _, path in entry["knockout"]] or [pd.DataFrame()]),
        description=model_description(manifest),
        thesis_model=entry["thesis_model"],
        replicates=list(dict.fromkeys(name for _, name, _ in entry["choices"])),
    )


def input_digests(files: Iterable[str]) -> dict[str, str]:
    """The config digest recorded in each input file (:func:`attnscope.io.recorded_digest`)."""
    return {path: io.recorded_digest(path) for path in files}
