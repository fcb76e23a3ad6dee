"""What the claims are measured on: the inputs of one model's claims (their layout by file),
loaded into one :class:`Evidence` record, and the one measurement made while loading (how
much of a clue is copied from its prompt)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from attnscope import io
from attnscope import variants as variant_names
from attnscope.prompts import WORD_PATTERN
from attnscope.store import open_store


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
    experiments' draws are read)."""
    replicates = [name for name, e in runs.items() if e["replicate_group"] in experiments]
    randoms = [v for v in spectra_variants if variant_names.parse(v).kind == "random"]

    def per_variant(model: str, suffix: str) -> list[list[str]]:
        return [
            [variant, name, f"results/metrics/{model}/{variant}/{name}{suffix}"]
            for name in replicates
            for variant in runs[name]["variants"]
        ]

    layout = {}
    for model in models:
        layout[model] = {
            "experiment": " + ".join(experiments),
            "seeds": {name: e["seed"] for name, e in runs.items()},
            "metrics": per_variant(model, ".parquet"),
            "choices": per_variant(model, ".choices.parquet"),
            "clues": [
                [variant, name, f"results/clues/{model}/{variant}/{name}.parquet"]
                for name, e in runs.items()
                for variant in e["variants"]
            ],
            "prompts": {name: f"results/prompts/{model}/{name}.parquet" for name in runs},
            "spectra": {v: f"results/spectra/{model}/{v}.parquet" for v in ["trained", *randoms]},
            "alignment": {v: f"results/spectra/{model}/{v}_alignment.parquet" for v in ["trained", *randoms]},
            "manifest": f"results/models/{model}/manifest.json",
            "thesis_model": model in set(thesis_models),
            "knockout": [
                [variant, name, f"results/knockout/{model}/{variant}/{name}.parquet"]
                for name, names in (knockouts or {}).get(model, {}).items()
                if name in replicates
                for variant in names
            ],
        }
    return layout


def evidence_files(layout: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """The files of an :func:`evidence_layout`, by kind (a rule's named inputs)."""
    kinds = ("metrics", "choices", "clues", "knockout", "prompts", "spectra", "manifest")
    files: dict[str, list[str]] = {kind: [] for kind in kinds}
    for entry in layout.values():
        for kind in ("metrics", "choices", "clues", "knockout"):
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
        spectra={variant: pd.read_parquet(path) for variant, path in entry["spectra"].items()},
        alignment={variant: pd.read_parquet(path) for variant, path in entry["alignment"].items()},
        clues=pd.concat(clue_frames, ignore_index=True),
        knockout=pd.concat([pd.read_parquet(path) for _, _, path in entry["knockout"]] or [pd.DataFrame()]),
        description=model_description(manifest),
        thesis_model=entry["thesis_model"],
        replicates=list(dict.fromkeys(name for _, name, _ in entry["choices"])),
    )


def input_digests(paths: Iterable[str]) -> dict[str, str]:
    """The config digest recorded in each input (a store's attributes, a Parquet's metadata, a
    model manifest's spec digest)."""

    def digest(path: str) -> str:
        if path.endswith(".zarr"):
            return open_store(path).attrs["config_digest"]
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                return json.load(f)["spec_digest"]
        return io.read_parquet_metadata(path)["config_digest"]

    return {path: digest(path) for path in paths}
