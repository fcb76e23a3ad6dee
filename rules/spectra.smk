# Weight spectra of every attention and MLP matrix, the base alignment Tr(W_qᵀW_k) per head,
# and the learned-vs-random comparison (docs/spectra.md); config section `spectra:`.

# The `spectra:` keys that decide weight_spectra's outputs (its params, hence its rerun trigger);
# variants and random_variant only decide which jobs exist.
SPECTRA_KEYS = ("include_embeddings", "method", "device", "max_batch_mb", "randomize", "seed")


def spectra_options(wildcards):
    return {key: config["spectra"][key] for key in SPECTRA_KEYS}


rule weight_spectra:
    input:
        manifest="results/models/{model}/manifest.json",
    output:
        table="results/spectra/{model}/{variant}.parquet",
        zarr=directory("results/spectra/{model}/{variant}.zarr"),
        alignment="results/spectra/{model}/{variant}_alignment.parquet",
        qk_circuits="results/spectra/{model}/{variant}_qk_circuits.parquet",
    params:
        spectra=spectra_options,
        model=lambda wc: attnscope_config.model_build_spec(model_spec(wc)),
    log:
        "results/logs/weight_spectra/{model}/{variant}.log",
    benchmark:
        "results/benchmarks/weight_spectra/{model}/{variant}.tsv"
    threads: MODEL_THREADS
    resources:
        **model_resources("weight_spectra"),
    script:
        "../scripts/weight_spectra.py"


rule spectra_comparison:
    input:
        trained="results/spectra/{model}/trained.parquet",
        random=lambda wc: f"results/spectra/{wc.model}/{PLAN.random_variant}.parquet",
    output:
        table="results/spectra/{model}/learned_vs_random.parquet",
        markdown="results/spectra/{model}/learned_vs_random.md",
    params:
        random_variant=PLAN.random_variant,
    log:
        "results/logs/spectra_comparison/{model}.log",
    benchmark:
        "results/benchmarks/spectra_comparison/{model}.tsv"
    resources:
        **fixed_resources(mem_mb=500, runtime=5),
    script:
        "../scripts/spectra_comparison.py"


rule spectra:
    input:
        [
            f"results/spectra/{model}/{variant}{suffix}"
            for model in PLAN.models
            for variant in PLAN.spectra_variants
            for suffix in (".parquet", ".zarr", "_alignment.parquet", "_qk_circuits.parquet")
        ],
        expand("results/spectra/{model}/learned_vs_random.{ext}", model=PLAN.models, ext=("parquet", "md")),
