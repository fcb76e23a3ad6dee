# What heads do and where information flows (docs/heads.md), config section `heads:`: head-type
# scores per layer × head on a seeded repeated-token probe, one job per model × spectra variant
# (a head's type is a property of the weights, like its spectrum); attention rollout with the
# residual per prompt from every attention store's head-mean maps.

HEADS_KEYS = ("probe_length", "probe_count", "seed", "threshold")
"""The `heads:` keys that decide head_types' outputs (its params, hence its rerun trigger)."""


def heads_options(wildcards):
    return {key: config["heads"][key] for key in HEADS_KEYS}


def head_types_resources():
    """mem_mb, runtime and gpu of a head_types job: an attention capture of probe_count prompts of
    BOS + two copies of probe_length tokens."""

    def request(key):
        def value(wildcards, input, attempt):
            job = attnscope_resources.attention_resources(
                model_spec(wildcards),
                model_size(wildcards, input),
                wildcards.variant,
                n_prompts=config["heads"]["probe_count"],
                tokens=2 * config["heads"]["probe_length"] + 1,
            )
            return getattr(job.for_attempt(attempt), key)

        return value

    return {key: request(key) for key in ("mem_mb", "runtime", "gpu")}


rule head_types:
    input:
        manifest="results/models/{model}/manifest.json",
    output:
        table="results/heads/{model}/{variant}.types.parquet",
        **figure_outputs(
            "results/figures/{model}/{variant}_head_types", "head_types", "Heads",
            labels={"variant": "{variant}", "figure": "head types"},
        ),
    params:
        heads=heads_options,
        load=load_options,
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/head_types/{model}/{variant}.log",
    benchmark:
        "results/benchmarks/head_types/{model}/{variant}.tsv"
    threads: MODEL_THREADS
    resources:
        **head_types_resources(),
    script:
        "../scripts/head_types.py"


rule rollout:
    input:
        store="results/attention/{model}/{variant}/{experiment}.zarr",
    output:
        table="results/rollout/{model}/{variant}/{experiment}.parquet",
        **figure_outputs(
            "results/figures/{model}/{variant}/{experiment}_rollout", "rollout", "Heads",
            subcategory="{experiment} · {variant}",
            labels={"variant": "{variant}", "figure": "attention rollout"},
        ),
    params:
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/rollout/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/rollout/{model}/{variant}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/rollout.py"


rule heads:
    input:
        [
            path
            for model in PLAN.models
            for variant in PLAN.spectra_variants
            for path in (
                f"results/heads/{model}/{variant}.types.parquet",
                *figure_paths(f"results/figures/{model}/{variant}_head_types"),
            )
        ],
        runs("results/rollout/{model}/{variant}/{experiment}.parquet"),
        [path for stem in runs("results/figures/{model}/{variant}/{experiment}_rollout") for path in figure_paths(stem)],
