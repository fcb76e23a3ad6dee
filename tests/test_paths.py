"""The results layout: every pattern under results/ with only the run's wildcards, partial
filling, and the claims' input files where the rules write them."""

from __future__ import annotations

import string

import pytest

from attnscope import evidence, paths

PATTERNS = {name: value for name, value in vars(paths).items() if name.isupper() and isinstance(value, str)}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_patterns_lie_under_results_with_the_run_wildcards(name):
    pattern = PATTERNS[name]
    fields = {field for _, field, _, _ in string.Formatter().parse(pattern) if field is not None}
    # knockouts: the knockout job's (every window of one knockout.edges entry, rules/knockout.smk)
    assert fields <= {"model", "variant", "experiment", "knockouts"}, f"{name}: {fields}"
    assert name == "RUN" or pattern == paths.RESULTS or pattern.startswith(f"{paths.RESULTS}/")


def test_fill_keeps_the_wildcards_it_is_not_given():
    assert paths.fill(paths.SPECTRA, variant="trained") == "results/spectra/{model}/trained.parquet"
    assert paths.fill(paths.CLUES, model="m") == "results/clues/m/{variant}/{experiment}.parquet"
    full = {"model": "m", "variant": "v", "experiment": "e"}
    assert (
        paths.fill(paths.METRICS, **full) == paths.METRICS.format(**full) == "results/metrics/m/v/e.parquet"
    )


def test_the_claims_read_the_files_the_rules_write():
    """The layout of one model's claims, written out by hand: a path that moved in
    attnscope.paths without the claims following (or the other way) fails here."""
    runs = {
        "animals-k3": {"variants": ["trained", "random-s0"], "seed": 0, "replicate_group": "animals-k3"},
        "animals-k3-seed1": {"variants": ["trained"], "seed": 1, "replicate_group": "animals-k3"},
        "animals-k5": {"variants": ["trained"], "seed": 0, "replicate_group": "animals-k5"},
    }
    layout = evidence.evidence_layout(["m"], ["animals-k3"], runs, ["trained", "random-s0", "qkscale-a2"])
    entry = layout["m"]
    assert entry["metrics"] == [
        ["trained", "animals-k3", "results/metrics/m/trained/animals-k3.parquet"],
        ["random-s0", "animals-k3", "results/metrics/m/random-s0/animals-k3.parquet"],
        ["trained", "animals-k3-seed1", "results/metrics/m/trained/animals-k3-seed1.parquet"],
    ]
    assert entry["choices"][1] == [
        "random-s0",
        "animals-k3",
        "results/metrics/m/random-s0/animals-k3.choices.parquet",
    ]
    assert entry["clues"][-1] == ["trained", "animals-k5", "results/clues/m/trained/animals-k5.parquet"]
    assert entry["prompts"]["animals-k5"] == "results/prompts/m/animals-k5.parquet"
    assert entry["spectra"] == {
        "trained": "results/spectra/m/trained.parquet",
        "random-s0": "results/spectra/m/random-s0.parquet",
    }
    assert entry["alignment"]["random-s0"] == "results/spectra/m/random-s0_alignment.parquet"
    assert entry["manifest"] == "results/models/m/manifest.json"
