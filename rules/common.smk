# Shared wildcard constraints and helpers: which outputs exist for the selected models,
# experiments and variants, and the config slices rules pass through `params:`.
import re

from attnscope import resources as attnscope_resources


wildcard_constraints:
    model="|".join(map(re.escape, config["models"])),
    experiment="|".join(map(re.escape, sorted(PLAN.experiments, key=len, reverse=True))),  # with replicates
    variant=attnscope_variants.WILDCARD_REGEX,


# Every output lies under results/: a file of that name stops the run here, with a message,
# rather than in Snakemake's DAG inventory with a traceback; onstart checks it is writable.
attnscope_config.check_results_dir(attnscope_paths.RESULTS)


def model_spec(wildcards):
    return config["models"][wildcards.model]


def load_options(wildcards):
    return attnscope_config.model_load_options(model_spec(wildcards))


def experiment_plan(wildcards):
    return PLAN.experiments[wildcards.experiment]


def runs(pattern, **extra):
    """Expand `pattern` over every selected model × experiment × that experiment's variants."""
    return [
        pattern.format(model=model, experiment=experiment, variant=variant, **extra)
        for model in PLAN.models
        for experiment in PLAN.experiments
        for variant in PLAN.experiments[experiment].variants
    ]


def every_spectra_variant(pattern):
    """`pattern` for every variant of the spectra (trained, spectra.variants, the random one), in
    that order, `{model}` kept a wildcard: the outputs of a job per model that loads them in turn."""
    return expand(pattern, variant=PLAN.spectra_variants, allow_missing=True)


# Figures: each written as PNG and SVG, the PNG marked for the HTML report with its caption
# (report/{caption}.rst). Used by rules/figures.smk.

FIGURE_FORMATS = ("png", "svg")


def figure_paths(stem):
    return [f"{stem}.{ext}" for ext in FIGURE_FORMATS]


def figure_outputs(stem, caption, category, subcategory=None, labels=None, prefix=""):
    """{png, svg} outputs of one figure (named ``{prefix}png``, ``{prefix}svg``); the PNG goes into
    the report with its caption."""
    return {
        f"{prefix}png": report(
            f"{stem}.png",
            caption=f"../report/{caption}.rst",
            category=category,
            subcategory=subcategory,
            labels=labels,
        ),
        f"{prefix}svg": f"{stem}.svg",
    }


def figure_set_outputs(folder, figures, category):
    """The outputs of several figures one job draws: ``figures`` maps a file stem (also its
    caption's name in report/) to its thesis-figure label; outputs ``{stem}_png``, ``{stem}_svg``."""
    outputs = {}
    for stem, label in figures.items():
        outputs.update(
            figure_outputs(f"{folder}/{stem}", stem, category, labels={"figure": label}, prefix=f"{stem}_")
        )
    return outputs


def figure_targets(spectra_figures, theory_figures):
    """Every figure, clue table and comparison of the selected models (PNG and SVG; the map
    figures of a store as its folder, see rule attention_figures); ``spectra_figures`` and
    ``theory_figures``: the file stems of those figures."""
    files = []
    for model in PLAN.models:
        stores = dict.fromkeys((experiment, variant) for experiment, variant, _, _ in PLAN.map_figures)
        files += [attnscope_paths.MAP_FIGURES.format(model=model, variant=v, experiment=e) for e, v in stores]
        for experiment in PLAN.experiments:
            if experiment in PLAN.replicate_groups():  # one curve figure pools the replicates
                curves = attnscope_paths.METRIC_CURVES.format(model=model, experiment=experiment)
                files += figure_paths(curves)
            files += [
                attnscope_paths.VARIANT_CLUES_CSV.format(model=model, experiment=experiment),
                attnscope_paths.VARIANT_CLUES_HTML.format(model=model, experiment=experiment),
            ]
        for name in spectra_figures:
            files += figure_paths(f"{attnscope_paths.MODEL_FIGURES.format(model=model)}/{name}")
    if len(PLAN.models) > 1:
        for experiment in PLAN.replicate_groups():
            files += figure_paths(attnscope_paths.METRIC_CURVES_ACROSS_MODELS.format(experiment=experiment))
    for name in theory_figures:
        files += figure_paths(f"{attnscope_paths.THEORY_FIGURES}/{name}")
    return files


# Resource requests (docs/cluster.md). Every rule declares mem_mb and runtime (minutes);
# rules that run a model also declare gpu: 0 unless the model's spec says device: cuda,
# then as many GPUs as its weights need. Sizes come from the prepared model's manifest
# (exact) or, before prepare_model has run, from the spec (attnscope.resources). Memory and
# time grow with the attempt (--retries). Resources are no rerun trigger: these functions
# may read config directly; what a job computes reaches it through params: only.
# Rules of seconds' work that join or reformat tables (import_clues, check_targets, clue_table,
# clue_comparison, spectra_comparison, head_table, report) are `localrule: True`: on a cluster
# they run beside Snakemake instead of waiting in the queue.

MODEL_THREADS = 4
"""Threads of a model job: scaled down to --cores locally, requested per job on a cluster
(never workflow.cores: a cluster run has no total core count)."""


def model_resources(stage, variant=None, runs=None):
    """mem_mb, runtime and gpu of a model job, for `resources: **model_resources("<rule>")`;
    ``variant``: the variant it loads where its wildcards name none (a knockout's: trained);
    ``runs``: wildcards → how many runs of that stage's work the job makes (its runtime scales)."""

    def request(key):
        def value(wildcards, input, attempt):
            resources = attnscope_resources.model_job(
                stage, config, PLAN, {**wildcards, "variant": variant} if variant else wildcards, input
            ).for_attempt(attempt)
            scale = runs(wildcards) if runs is not None and key == "runtime" else 1
            return getattr(resources, key) * scale

        return value

    return {key: request(key) for key in ("mem_mb", "runtime", "gpu")}


def fixed_resources(mem_mb, runtime):
    """mem_mb and runtime of a job without a model, doubled on each retry."""
    return {
        "mem_mb": lambda wildcards, attempt: mem_mb * attempt,
        "runtime": lambda wildcards, attempt: runtime * attempt,
    }


onstart:
    attnscope_config.check_results_dir(attnscope_paths.RESULTS, writable=True)
    # CUDA asked for where none exists: fail before the first job, not inside one. Locally
    # torch must see a GPU; on SLURM the head node may have none, so the cluster must
    # offer GPUs (each job checks its own node again when it loads the model).
    _cuda = [name for name in PLAN.models if config["models"][name]["device"] == "cuda"]
    if _cuda and any(job.resources.get("gpu", 0) for job in workflow.dag.needrun_jobs()):
        attnscope_resources.require_cuda(
            _cuda, "local" if workflow.local_exec else workflow.executor_plugin.name
        )
