# What heads do and where information flows (docs/heads.md), config section `heads:`: head-type
# scores per layer × head on a seeded repeated-token probe of every spectra variant, one job per
# model (a head's type is a property of the weights, like its spectrum); attention rollout with the
# residual per prompt from every attention store's head-mean maps; one table per head (weights,
# behaviour on the claims' experiments, types) per model × variant of spectra.variants that has
# metrics on those experiments, and the rank correlations of its weight and behaviour columns.
# Their figures are drawn from these tables by the rules of rules/figures.smk.

rule head_types:
    """One job per model: the probe on every variant of the spectra, loaded in turn, one model start
    for them all (docs/performance.md); a changed variant list reruns the whole job."""
    input:
        manifest=attnscope_paths.MANIFEST,
    output:
        table=every_spectra_variant(attnscope_paths.HEAD_TYPES),
    params:
        heads=lambda wc: attnscope_config.config_slice(config, "heads", attnscope_config.HEADS_KEYS),
        load=load_options,
        variants=PLAN.spectra_variants,  # which outputs, in their order: in no variant's digest
    log:
        "results/logs/head_types/{model}.log",
    benchmark:
        "results/benchmarks/head_types/{model}.tsv"
    threads: MODEL_THREADS
    resources:
        **model_resources("head_types"),
    script:
        "../scripts/head_types.py"


rule rollout:
    input:
        store=attnscope_paths.ATTENTION_STORE,
    output:
        table=attnscope_paths.ROLLOUT,
    log:
        "results/logs/rollout/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/rollout/{model}/{variant}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/rollout.py"


rule head_table:
    localrule: True
    input:
        qk=attnscope_paths.QK_CIRCUITS,
        ov=attnscope_paths.OV_CIRCUITS,
        types=attnscope_paths.HEAD_TYPES,
        metrics=lambda wc: [
            attnscope_paths.METRICS.format(model=wc.model, variant=wc.variant, experiment=experiment)
            for experiment in PLAN.claims_experiments
        ],
        value_metrics=lambda wc: [
            attnscope_paths.VALUE_METRICS.format(model=wc.model, variant=wc.variant, experiment=experiment)
            for experiment in PLAN.claims_experiments
        ],
    output:
        table=attnscope_paths.HEAD_TABLE,
    params:
        threshold=lambda wc: config["heads"]["threshold"],
    log:
        "results/logs/head_table/{model}/{variant}.log",
    benchmark:
        "results/benchmarks/head_table/{model}/{variant}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/head_table.py"


rule head_correlations:
    input:
        tables=lambda wc: [
            attnscope_paths.HEAD_TABLE.format(model=wc.model, variant=variant)
            for variant in PLAN.head_table_variants()
        ],
    output:
        table=attnscope_paths.HEAD_CORRELATIONS,
    log:
        "results/logs/head_correlations/{model}.log",
    benchmark:
        "results/benchmarks/head_correlations/{model}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/head_correlations.py"


rule heads:
    input:
        [
            path
            for model in PLAN.models
            for variant in PLAN.spectra_variants
            for path in (
                attnscope_paths.HEAD_TYPES.format(model=model, variant=variant),
                *figure_paths(attnscope_paths.HEAD_TYPE_FIGURE.format(model=model, variant=variant)),
            )
        ],
        runs(attnscope_paths.ROLLOUT),
        [
            path
            for pattern in (attnscope_paths.ROLLOUT_FIGURE, attnscope_paths.VALUE_ROLLOUT_FIGURE)
            for stem in runs(pattern)
            for path in figure_paths(stem)
        ],
        [
            path
            for model in PLAN.models
            for path in (
                *[attnscope_paths.HEAD_TABLE.format(model=model, variant=v) for v in PLAN.head_table_variants()],
                attnscope_paths.HEAD_CORRELATIONS.format(model=model),
                *figure_paths(attnscope_paths.HEAD_CORRELATION_FIGURE.format(model=model)),
            )
        ],
