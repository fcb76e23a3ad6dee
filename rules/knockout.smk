# Attention knockout effects (docs/attention.md, "Knockout effects"): per model × experiment ×
# knockout (edge set × layer window, `knockout:`), what blocking the edges does to the trained
# model's clue; per model × experiment, the effects table (its figure: rule knockout_figure in
# rules/figures.smk). One job runs every window of one `knockout.edges` entry (a control with all
# its seeds), sharing the unchanged model's passes: adding an edge set runs only its job (and the
# table that combines them), a changed window list reruns every edge set's job
# (docs/performance.md says why that is worth it).

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
    """Per prompt: the trained clue's log-probability with and without each knockout of one edge
    set (every window; and, with knockout.greedy, the knocked-out greedy clue scored against it)."""
    input:
        prompts=attnscope_paths.PROMPTS,
        clues=attnscope_paths.fill(attnscope_paths.CLUES, variant="trained"),
        manifest=attnscope_paths.MANIFEST,
    output:
        rows=attnscope_paths.KNOCKOUT,
    wildcard_constraints:
        knockouts=attnscope_variants.KNOCKOUT_SET_REGEX,
    params:
        # every window of one knockout.edges entry
        knockouts=lambda wc: attnscope_variants.knockout_sets(KNOCKOUTS[wc.model][wc.experiment])[wc.knockouts],
        greedy=lambda wc: config["knockout"]["greedy"],
        generation=lambda wc: attnscope_config.config_slice(config, "generation", ("max_new_tokens", "clean_up")),
        load=load_options,
    log:
        "results/logs/knockout/{model}/{knockouts}/{experiment}.log",
    benchmark:
        "results/benchmarks/knockout/{model}/{knockouts}/{experiment}.tsv"
    # One thread (attnscope.knockout.clue_logprobs runs on one whatever it gets): the edge sets'
    # jobs run side by side instead.
    threads: 1
    resources:
        # a teacher-forced knockout pass costs no more than generating the clue: one generation's
        # runtime per knockout of the job (every window, every control seed)
        **model_resources(
            "generate_clues",
            variant="trained",
            runs=lambda wc: attnscope_variants.knockout_runs(
                attnscope_variants.knockout_sets(KNOCKOUTS[wc.model][wc.experiment])[wc.knockouts]
            ),
        ),
    script:
        "../scripts/knockout.py"


rule knockout_effects:
    """One experiment's knockouts: per edge set and window the mean effect with its interval, and
    the paired comparison with the random control."""
    input:
        rows=lambda wc: [
            attnscope_paths.KNOCKOUT.format(model=wc.model, knockouts=group, experiment=wc.experiment)
            for group in attnscope_variants.knockout_sets(KNOCKOUTS[wc.model][wc.experiment])
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
