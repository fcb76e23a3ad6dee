"""Partial reruns on a tiny config: a config change reruns exactly the jobs that read it.

One real run of the default target (the session's tiny_variants_run), then Snakemake dry
runs after each change. The expected jobs are read off a `--forceall` dry run of the changed
config (all its jobs) by their wildcards, e.g. "every job of variant qkscale-a2 of
animals-k2", so the tests hold for every stage in the default target, present and future.
Jobs that combine others (an experiment's variant comparison, a model's spectra figures, the
claims table) rerun with what they combine, and only then (`with_aggregates`). Every value a
rule uses reaches it through `params:` (Snakemake's params rerun trigger); a rule that read
config any other way would be missed by the dry run, and the changed-value cases below fail.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import REPO
from tests.helpers import every_job, planned_jobs, variants_config, with_aggregates

pytestmark = pytest.mark.integration

MODEL = "tiny-mistral"
FIGURE_RULES = (
    "attention_figures",
    "metric_curves",
    "spectra_figures",
    "theory_figures",
    "head_types_figure",
    "rollout_figures",
    "head_correlations_figure",
    "knockout_figure",
)
"""The rules that draw figures from the tables and stores of the rules that compute them (the run's
figure rules: metric_curves_across_models needs a second model)."""
MODEL_RULES = (
    "prepare_model",
    "weight_spectra",
    "generate_clues",
    "extract_attention",
    "head_types",
    "knockout",
)
"""The rules that load a model."""
PROBE = ("head_types", "head_types_figure")
"""The head-type probe (one model job per model, every spectra variant in turn) and its figures (one
per variant): they read no prompt."""


def base_config() -> dict:
    """The config of the session's tiny run with three variants (conftest's tiny_variants_run)."""
    return variants_config()


@pytest.fixture
def finished_run(tiny_variants_run):
    return tiny_variants_run


def write_config(workdir, change=None) -> None:
    config = base_config()
    if change is not None:
        change(config)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def run_after(workdir, change) -> tuple[list, list]:
    """(planned jobs, every job) after `change(config)`; the base config is restored after."""
    write_config(workdir, change)
    try:
        return planned_jobs(workdir), every_job(workdir)
    finally:
        write_config(workdir)


def having(jobs, *wildcards: str, rules: tuple[str, ...] = ()) -> list:
    """The jobs whose wildcards include every `key=value` given (or whose rule is named)."""
    return sorted(
        (rule, wc)
        for rule, wc in jobs
        if rule in rules or (wildcards and all(w in wc.split(", ") for w in wildcards))
    )


def set_key(path: str, value):
    """A change that sets one dotted config key (`models.tiny-mistral.seed`)."""

    def change(config):
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value

    return change


def prompt_side(jobs) -> list:
    """Jobs without the target check, which reads only an experiment's category and targets."""
    return [job for job in jobs if job[0] != "check_targets"]


def test_nothing_changed_runs_nothing(finished_run):
    assert planned_jobs(finished_run) == []


def test_one_alpha_added_runs_only_that_variant(finished_run):
    def add_alpha(config):
        config["experiments"]["animals-k2"]["variants"].append("qkscale-a0.5")

    planned, jobs = run_after(finished_run, add_alpha)
    assert planned == with_aggregates(having(jobs, "variant=qkscale-a0.5", "experiment=animals-k2"), jobs)
    assert ("clue_comparison", f"model={MODEL}, experiment=animals-k2") in planned
    assert not having(planned, "experiment=food-k3")
    assert {"generate_clues", "clue_table"} <= {rule for rule, _ in planned}


def test_one_knockout_added_runs_only_that_knockout(finished_run):
    """A new edge set in knockout.edges: its knockout job (every window of the set) and the tables
    that combine it, nothing of the other knockouts; a change of the control seed reruns only the
    controls; a window added reruns every edge set's job (one job runs all windows of a set) and
    what combines them, no other job."""

    def add_edges(config):
        edges = ["target-shots", "target-shotwords", "across-shots", "control-target-shots",
                 "control-target-shotwords", "target-shotclues"]  # fmt: skip
        config["knockout"] = {"edges": edges}

    planned, jobs = run_after(finished_run, add_edges)
    added = ("knockout", f"model={MODEL}, knockouts=knockout-target-shotclues, experiment=animals-k2")
    assert planned == with_aggregates([added], jobs)
    assert ("knockout_effects", f"model={MODEL}, experiment=animals-k2") in planned
    planned, jobs = run_after(finished_run, set_key("knockout", {"control_seeds": 3}))
    controls = [f"knockouts=knockout-control-{edges}-s0-2" for edges in ("target-shots", "target-shotwords")]
    rerun = sorted(job for control in controls for job in having(jobs, control))
    assert planned == with_aggregates(rerun, jobs) and all(having(planned, c) for c in controls)
    planned, jobs = run_after(finished_run, set_key("knockout", {"windows": [[0, 1], [1, 1]]}))
    sets = having(jobs, rules=("knockout",))
    assert len(sets) == 5 and planned == with_aggregates(sets, jobs)


def test_one_k_changed_runs_only_that_experiment(finished_run):
    # Every variant of animals-k2 reruns; food-k3, the model, the clues and the theory checks do not.
    planned, jobs = run_after(finished_run, set_key("experiments.animals-k2.k", 4))
    assert planned == with_aggregates(prompt_side(having(jobs, "experiment=animals-k2")), jobs)
    assert not having(planned, "experiment=food-k3", rules=("weight_spectra", "spectra_comparison"))
    assert {wc for rule, wc in planned if rule == "generate_clues"} == {
        f"model={MODEL}, variant={variant}, experiment=animals-k2"
        for variant in ("trained", "random-s0", "qkscale-a2")
    }


def test_model_changed_runs_everything_for_that_model(finished_run):
    planned, jobs = run_after(finished_run, set_key(f"models.{MODEL}.seed", 1))
    assert planned == with_aggregates(having(jobs, f"model={MODEL}"), jobs)
    assert ("prepare_model", f"model={MODEL}") in planned
    assert not having(planned, rules=("import_clues", "theory_checks"))
    # Another model: all of its jobs, nothing of the clue import or the theory checks; its
    # tokenizer, SmolLM2's, converted from the GGUF once (the run's first smollm2 model).
    planned, jobs = run_after(finished_run, set_key("model", "tiny-llama"))
    own = with_aggregates(having(jobs, "model=tiny-llama"), jobs)
    assert planned == sorted([*own, ("smollm2_tokenizer", "")]) and len(planned) > 10


@pytest.mark.parametrize(
    ("key", "value", "selects"),
    [
        # How a model runs (load options) reruns every job of a variant, not the weights, the
        # prompts or the spectra (always from float32 weights, never batched by prompt).
        pytest.param(f"models.{MODEL}.dtype", "bfloat16", "variant jobs", id="dtype"),
        pytest.param(f"models.{MODEL}.chat_template", None, "prompt jobs", id="chat_template"),
        pytest.param("generation.batch_size", 1, "generation jobs", id="batch_size"),
        pytest.param("experiments.food-k3.seed", 5, "prompts of food-k3", id="seed"),
        pytest.param("experiments.food-k3.n_targets", 1, "experiment=food-k3", id="n_targets"),
        pytest.param("theory.trials", 300, "theory_checks", id="theory"),
        # The few-shot format: the prompts and all that follows them, of every experiment or,
        # overridden in one experiment, of that one.
        pytest.param("prompts.acknowledgement", "Sure.", "prompt format jobs", id="prompt_format"),
        pytest.param(
            "experiments.food-k3.prompts", {"instruction": None}, "prompts of food-k3", id="override"
        ),
    ],
)
def test_each_value_reruns_the_jobs_that_read_it(finished_run, key, value, selects):
    planned, jobs = run_after(finished_run, set_key(key, value))
    # The jobs that load a variant as the model's load options say: those whose wildcards name
    # it, a knockout job (the trained variant on the trained clues; its wildcards name an edge set,
    # knockouts=…) and a head_types job (every spectra variant of its model; its wildcards name
    # none). Not weight_spectra (also one job per model): it always loads float32 weights.
    variant_jobs = [job for job in jobs if "variant=" in job[1] or job[0] in ("knockout", "head_types")]
    expected = {
        "variant jobs": variant_jobs,
        # Jobs of the variant's prompts: not its head types' probe.
        "generation jobs": [job for job in variant_jobs if job[0] not in PROBE],
        # The chat template shapes the prompts and all that follows them, not the weights.
        "prompt jobs": [
            job for job in having(jobs, f"model={MODEL}") if job[0] not in ("prepare_model", "weight_spectra")
        ],
        # The few-shot format shapes the prompts only: not the head types' probe (no template).
        "prompt format jobs": [
            job
            for job in having(jobs, f"model={MODEL}")
            if job[0] not in ("prepare_model", "weight_spectra", *PROBE)
        ],
        "experiment=food-k3": having(jobs, "experiment=food-k3"),
        "prompts of food-k3": prompt_side(having(jobs, "experiment=food-k3")),
        "theory_checks": having(jobs, rules=("theory_checks",)),
    }[selects]
    assert planned == with_aggregates(expected, jobs) and planned


def test_clue_sources_rerun_everything_downstream_of_the_import(finished_run):
    def relabel(config):  # same file, category now taken from its name: a params change only
        config["data"]["clue_files"][0]["category"] = None

    planned, jobs = run_after(finished_run, relabel)
    independent = ("prepare_model", "theory_checks", "theory_figures", *PROBE) + (
        "weight_spectra",
        "spectra_comparison",
        "spectra_figures",
    )
    assert planned == [job for job in jobs if job[0] not in independent]


@pytest.mark.parametrize("key", ["probe_length", "probe_count", "seed"])
def test_a_head_probe_setting_reruns_only_the_head_types(finished_run, key):
    """The probe is the same for every variant: the model's head_types job (every spectra variant)
    reruns, the figures of every variant and the head tables that join them, nothing else (the
    rollout reads the attention stores, not the probe)."""
    value = {"probe_length": 7, "probe_count": 2, "seed": 3}[key]
    planned, jobs = run_after(finished_run, set_key(f"heads.{key}", value))
    heads = (*PROBE, "head_table", "head_correlations", "head_correlations_figure")
    assert planned == having(jobs, rules=heads)
    assert having(planned, rules=("head_types",)) == [("head_types", f"model={MODEL}")]
    assert len(having(planned, rules=("head_types_figure",))) == len(base_config()["spectra"]["variants"])
    assert having(planned, rules=("head_table",)) and having(planned, rules=("head_correlations",))


def test_the_head_type_threshold_reruns_no_model_job(finished_run):
    """heads.threshold labels the probe's scores where they are read: the head tables, what reads
    them, and the head-type figures; the probe (a model job) keeps its scores."""
    planned, jobs = run_after(finished_run, set_key("heads.threshold", 0.5))
    readers = ("head_types_figure", "head_table", "head_correlations", "head_correlations_figure")
    assert planned == having(jobs, rules=readers)
    assert len(having(planned, rules=("head_types_figure",))) == len(base_config()["spectra"]["variants"])
    assert not having(planned, rules=MODEL_RULES)


def test_a_figure_setting_reruns_only_the_figure_rules(finished_run):
    """figures.dpi decides figures only: every figure job reruns, no job that runs a model or
    writes a table or a store."""
    planned, jobs = run_after(finished_run, set_key("figures.dpi", 100))
    assert planned == having(jobs, rules=FIGURE_RULES)
    assert {rule for rule, _ in planned} == set(FIGURE_RULES)
    assert not having(planned, rules=MODEL_RULES)


def test_scripts_read_config_only_through_params():
    """A script that read snakemake.config would bypass the params rerun trigger."""
    for script in sorted((REPO / "scripts").glob("*.py")):
        source = script.read_text()
        assert not re.search(r"snakemake\s*\.\s*config\b", source), f"{script.name} reads snakemake.config"
