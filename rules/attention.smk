# Attention maps of every layer per model variant and experiment (a Zarr store), and their
# metrics per prompt × layer × head with a per-layer summary (docs/attention.md);
# config section `attention:`.


def attention_options(wildcards):
    return {key: config["attention"][key] for key in ("append_clue", "keep_heads", "kernel", "share_prefix")}


def attention_clues(wildcards):
    """The generated clues to append, when attention.append_clue is on."""
    if not config["attention"]["append_clue"]:
        return []
    return f"results/clues/{wildcards.model}/{wildcards.variant}/{wildcards.experiment}.parquet"


rule extract_attention:
    input:
        prompts="results/prompts/{model}/{experiment}.parquet",
        clues=attention_clues,
        manifest="results/models/{model}/manifest.json",
    output:
        store=directory("results/attention/{model}/{variant}/{experiment}.zarr"),
    params:
        attention=attention_options,
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
        store="results/attention/{model}/{variant}/{experiment}.zarr",
    output:
        metrics="results/metrics/{model}/{variant}/{experiment}.parquet",
        summary="results/metrics/{model}/{variant}/{experiment}.summary.parquet",
        markdown="results/metrics/{model}/{variant}/{experiment}.summary.md",
        choices="results/metrics/{model}/{variant}/{experiment}.choices.parquet",
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
        runs("results/metrics/{model}/{variant}/{experiment}.parquet"),
        runs("results/metrics/{model}/{variant}/{experiment}.summary.md"),
