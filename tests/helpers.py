"""Helpers shared by test files: a tiny config, a Snakemake run in a directory and the jobs a
run plans; an attention store's arrays recomputed from its own maps, and float16 steps between maps."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import yaml
import zarr
from threadpoolctl import threadpool_limits

from attnscope import attention, choices, metrics, store
from tests.conftest import snakemake_command, workflow_config

REPORT_AFTER_RUN = ("--report", "results/report.html", "--report-after-run")
"""Snakemake's HTML report of the run, written after it (README: the documented command)."""


def tiny_config(model: str = "tiny-mistral", **experiments) -> dict:
    config = workflow_config()
    config["model"] = model
    config["experiments"] = experiments or {
        "animals-k2": {"category": "Animals", "k": 2, "n_targets": 3},
        "food-k3": {"category": "Food", "k": 3, "n_targets": 2},
    }
    config["generation"] = {"max_new_tokens": 6, "batch_size": 2}
    # trained and the random init the comparisons use (config.yaml adds two init seeds and the
    # α edits): every stage runs, with four weight_spectra and head_types jobs fewer per run
    config["spectra"]["variants"] = ["trained", "random-s0"]
    config["theory"] = {
        "trials": 200,
        "samples": 2000,
        "trials_spectral": 20,
        "slerp_pairs": 20,
        "mp_shapes": [[64, 32]],
        "mp_trials": 2,
        "attention_sizes": [16, 32],
    }
    return config


STAGE_TARGETS = (
    *(f"results/clues/tiny-mistral/trained/{e}.parquet" for e in ("animals-k2", "food-k3")),
    *(f"results/metrics/tiny-mistral/trained/{e}.parquet" for e in ("animals-k2", "food-k3")),
    "results/spectra/tiny-mistral/learned_vs_random.parquet",
    "results/theory/checks.parquet",
    "results/claims.parquet",
)
"""Targets of tiny_config() with a Parquet table or a Zarr store of every stage: data, prompts,
clues, attention, metrics, spectra, theory, knockout, claims (the clue tables, figures and
report hold no digest)."""


def variants_config() -> dict:
    """tiny_config() with three variants of animals-k2 (trained, a random init, W_q and W_k
    scaled by 2) and every kind of attention-map figure of its Ant prompt."""
    config = tiny_config()
    config["experiments"]["animals-k2"]["variants"] = ["trained", "random-s0", "qkscale-a2"]
    config["figures"]["maps"] = [
        {
            "experiments": ["animals-k2"],
            "variants": "all",
            "targets": ["Ant"],
            "kinds": ["word_grid", "token_grid", "cosine", "word_pass", "token_pass"],
        }
    ]
    return config


def snakemake(workdir: Path, *args: str, config: dict | None = None) -> str:
    if config is not None:
        (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    run = subprocess.run(
        snakemake_command(workdir, "--cores", "2", *args),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return run.stdout + run.stderr


def planned_jobs(workdir: Path) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run would execute."""
    out = snakemake(workdir, "-n")
    jobs = []
    for block in re.split(r"\n(?=\[.*\]\n)|\n(?=(?:local)?rule \w+:)", out):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if rule is None or rule.group(1) == "all":
            continue
        wildcards = re.search(r"wildcards: (.*)", block)
        jobs.append((rule.group(1), wildcards.group(1) if wildcards else ""))
    return sorted(jobs)


def every_job(workdir: Path) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job of the current config (a --forceall dry run)."""
    out = snakemake(workdir, "-n", "--forceall")
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if rule and rule.group(1) != "all":
            wildcards = re.search(r"wildcards: (.*)", block)
            jobs.append((rule.group(1), wildcards.group(1) if wildcards else ""))
    return sorted(jobs)


AGGREGATE_SOURCES = {
    "metric_curves": ("attention_metrics",),
    "clue_comparison": ("generate_clues", "clue_table"),
    "spectra_comparison": ("weight_spectra",),
    "spectra_figures": ("weight_spectra",),
    "knockout_effects": ("knockout",),
}
"""Jobs that combine the jobs of several variants: an experiment's variant comparison, its
knockout effects and a model's spectra comparison rerun with the jobs they combine (same model,
experiment)."""
TABLE_FIGURES = {"knockout_effects": "knockout_figure", "head_correlations": "head_correlations_figure"}
"""The figure rule that draws a combining job's table (same wildcards): it reruns with the table."""


def with_aggregates(selected: list, jobs: list, claims_experiment: str = "animals-k2") -> list:
    """`selected` plus the jobs of `jobs` that combine them: the aggregates above, the claims
    table (it reads every experiment's results of a model), a variant's head table (its head
    types and its metrics on `claims_experiment`, the first experiment of the tests' configs) and
    a model's head correlations (its head tables), and the figures of those tables (TABLE_FIGURES)."""
    combining = (*AGGREGATE_SOURCES, "claims", "head_table", "head_correlations", *TABLE_FIGURES.values())
    chosen = sorted({job for job in selected if job[0] not in combining})
    found = [set(wc.split(", ")) for _, wc in chosen]

    def combines(rule: str, wildcards: str) -> bool:
        if rule == "claims":
            return any(w.startswith("model=") for keys in found for w in keys)
        keys = set(wildcards.split(", "))
        if rule == "head_table":
            return any(
                keys <= f
                and (
                    r == "head_types" or (r == "attention_metrics" and f"experiment={claims_experiment}" in f)
                )
                for (r, _), f in zip(chosen, found)
            )
        if rule == "head_correlations":
            return False
        return any(r in AGGREGATE_SOURCES[rule] and keys <= f for (r, _), f in zip(chosen, found))

    chosen += [(rule, wc) for rule, wc in jobs if rule in combining and combines(rule, wc)]
    tables = [set(wc.split(", ")) for rule, wc in chosen if rule == "head_table"]
    chosen += [
        (rule, wc)
        for rule, wc in jobs
        if rule == "head_correlations" and any(set(wc.split(", ")) <= t for t in tables)
    ]
    drawn = {(TABLE_FIGURES[rule], wc) for rule, wc in chosen if rule in TABLE_FIGURES}
    return sorted(chosen + [job for job in jobs if job in drawn])


def float16_steps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float16 values lie between ``a`` and ``b`` (non-negative float16 arrays, whose bit
    patterns order like their values), element by element."""
    assert a.dtype == b.dtype == np.float16 and a.shape == b.shape
    assert not (np.signbit(a).any() or np.signbit(b).any()), "maps are non-negative"
    return np.abs(a.view(np.uint16).astype(np.int32) - b.view(np.uint16).astype(np.int32))


def derived_arrays(group: zarr.Group) -> dict[str, tuple[tuple, np.ndarray]]:
    """What a prompt group of an attention store derives from its stored maps, recomputed here
    from the stored maps alone, as ``{array: (index, values)}``: the head means of the kept heads
    (float32 sum in head order), the streamed metrics and singular values of every stored map
    (without kept heads: of the head mean only, ``index`` selects it), the head means' choices (in
    the capture's chunks of layers) and word maps, the same of the value-weighted maps. A store's
    arrays are a function of its maps exactly when ``array[index]`` equals ``values`` bit for bit.
    numpy's BLAS runs on one thread, as in the capture (a long dot product split over threads
    rounds differently)."""
    with threadpool_limits(1, "blas"):
        return _derived_arrays(group)


def _derived_arrays(group: zarr.Group) -> dict[str, tuple[tuple, np.ndarray]]:
    attrs, num_heads = group.attrs, group["metrics"].shape[1] - 1
    layout = metrics.MapLayout(
        np.array(attrs["token_shot"]), np.array(attrs["token_segment"]), group["cosine"][...]
    )
    n = attrs["n_tokens"]
    step = max(1, choices.CHUNK_VALUES // (n * n))
    words = store.word_membership_matrix(attrs["token_word"], attrs["map_words"])
    thesis_words = store.word_membership_matrix(attrs["thesis_token_word"], range(len(attrs["thesis_words"])))
    every, mean_only = (slice(None),), (slice(None), slice(num_heads, None))
    derived: dict[str, tuple[tuple, np.ndarray]] = {}
    for prefix in ("", "value_"):
        if f"{prefix}head_mean" not in group:
            continue
        head_mean = group[f"{prefix}head_mean"][...]
        heads = group[f"{prefix}attn"][...] if f"{prefix}attn" in group else None
        maps = head_mean[:, None] if heads is None else np.concatenate([heads, head_mean[:, None]], axis=1)
        kept = every if heads is not None else mean_only
        derived[f"{prefix}metrics"] = (
            kept,
            np.array([[metrics.streamed_metrics(m, layout) for m in layer] for layer in maps]),
        )
        derived[f"{prefix}choices"] = (
            every,
            np.concatenate(
                [
                    choices.stored_choices(
                        head_mean[i : i + step], attrs["token_segment"], attrs["token_shot"]
                    )
                    for i in range(0, len(head_mean), step)
                ]
            ),
        )
        summed = np.stack([attention.word_maps(m, words)[0] for m in head_mean])
        derived[f"{prefix}word_attn_sum"] = (every, summed)
        if prefix:
            continue
        derived["word_attn_mean_query"] = (
            every,
            np.stack([attention.word_maps(m, words)[1] for m in head_mean]),
        )
        derived["thesis_word_attn_sum"] = (
            every,
            np.stack([attention.word_maps(m, thesis_words)[0] for m in head_mean]),
        )
        singular = np.stack([attention.singular_values(layer) for layer in maps])
        derived["singular_values"] = (kept, singular)
        if heads is not None:
            total = heads[:, 0].astype(np.float32)
            for head in range(1, num_heads):
                total += heads[:, head]
            derived["head_mean"] = (every, (total / np.float32(num_heads)).astype(np.float16))
    return derived


def assert_derived_from_its_maps(group: zarr.Group) -> None:
    """Every array of a prompt group that derives from its maps is :func:`derived_arrays` bit for bit."""
    for name, (index, values) in derived_arrays(group).items():
        np.testing.assert_array_equal(group[name][index], values, err_msg=f"{group.path}/{name}")
