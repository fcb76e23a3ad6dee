# Attention knockout effects (docs/attention.md, "Knockout effects"): per model × experiment ×
# knockout (edge set × layer window, `knockout:`), what blocking the edges does to the trained
# model's clue; per model × experiment, the effects table (its figure: rule knockout_figure in
# rules/figures.smk). Each knockout is its own job, so adding one to the config runs only it (and
# the table that combines them).

KNOCKOUTS = attnscope_variants.knockout_plan(
    config["knockout"],
    # Layer counts: the prepared manifest, else the spec (tiny-random) or attnscope.resources.KNOWN.
    {
        model: attnscope_resources.model_size(
            config["models"][model], attnscope_paths.MANIFEST.format(model=model)
        ).layers
        for model in PLAN.models
    },
    list(PLAN.experiments),
    PLAN.claims_experiments,
)
"""Model → experiment → the knockout variants run on its prompts."""


rule knockout:
    """Per prompt: the trained clue's log-probability with and without the knockout (and, with
    knockout.greedy, the knocked-out greedy clue scored against it)."""
    input:
        prompts=attnscope_paths.PROMPTS,
        clues=attnscope_paths.fill(attnscope_paths.CLUES, variant="trained"),
        manifest=attnscope_paths.MANIFEST,
    output:
        rows=attnscope_paths.KNOCKOUT,
    params:
        greedy=lambda wc: config["knockout"]["greedy"],
        generation=lambda wc: attnscope_config.config_slice(config, "generation", ("max_new_tokens", "clean_up")),
        load=load_options,
    log:
        "results/logs/knockout/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/knockout/{model}/{variant}/{experiment}.tsv"
    # One thread (attnscope.knockout.clue_logprobs runs on one whatever it gets): the many small
    # knockout jobs run side by side instead.
    threads: 1
    resources:
        **model_resources("generate_clues"),
    script:
        "../scripts/knockout.py"


rule knockout_effects:
    """One experiment's knockouts: per edge set and window the mean effect with its interval, and
    the paired comparison with the random control."""
    input:
        rows=lambda wc: [
            attnscope_paths.KNOCKOUT.format(model=wc.model, variant=variant, experiment=wc.experiment)
            for variant in KNOCKOUTS[wc.model][wc.experiment]
        ],
    output:
        table=attnscope_paths.KNOCKOUT_EFFECTS,
        markdown=attnscope_paths.KNOCKOUT_EFFECTS_MD,
    log:
        "results/logs/knockout_effects/{model}/{experiment}.log",
    benchmark:
        "results/benchmarks/knockout_effects/{model}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/knockout_effects.py"


rule knockouts:
    """Every knockout effects table and figure of the run."""
    input:
        [
            path
            for model, runs in KNOCKOUTS.items()
            for experiment, names in runs.items()
            if names
            for path in [
                attnscope_paths.KNOCKOUT_EFFECTS_MD.format(model=model, experiment=experiment),
                *figure_paths(attnscope_paths.KNOCKOUT_FIGURE.format(model=model, experiment=experiment)),
            ]
        ],
