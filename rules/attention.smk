# Attention maps of every layer per model variant and experiment (a Zarr store), and their
# metrics per prompt × layer × head with a per-layer summary (docs/attention.md);
# config section `attention:`.


rule extract_attention:
    input:
        prompts=attnscope_paths.PROMPTS,
        clues=attnscope_paths.CLUES if config["attention"]["append_clue"] else [],  # the clues to append
        manifest=attnscope_paths.MANIFEST,
    output:
        store=directory(attnscope_paths.ATTENTION_STORE),
    params:
        attention=lambda wc: attnscope_config.config_slice(
            config, "attention", attnscope_config.ATTENTION_KEYS
        ),
        load=load_options,
    log:
        "results/logs/extract_attention/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/extract_attention/{model}/{variant}/{experiment}.tsv"
    threads: MODEL_THREADS
    resources:
        **model_resources("extract_attention"),
    script:
        "../scripts/extract_attention.py"


rule attention_metrics:
    input:
        store=attnscope_paths.ATTENTION_STORE,
    output:
        metrics=attnscope_paths.METRICS,
        summary=attnscope_paths.METRICS_SUMMARY,
        markdown=attnscope_paths.METRICS_SUMMARY_MD,
        choices=attnscope_paths.CHOICES,
        value_metrics=attnscope_paths.VALUE_METRICS,
        value_choices=attnscope_paths.VALUE_CHOICES,
    params:
        epsilon=lambda wc: config["attention"]["epsilon"],
    log:
        "results/logs/attention_metrics/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/attention_metrics/{model}/{variant}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=2000, runtime=20),
    script:
        "../scripts/attention_metrics.py"


rule attention:
    input:
        runs(attnscope_paths.METRICS),
        runs(attnscope_paths.METRICS_SUMMARY_MD),
