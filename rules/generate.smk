# Greedy clue generation per model variant and experiment, and the clue tables (A.1-A.3).


rule generate_clues:
    input:
        prompts="results/prompts/{model}/{experiment}.parquet",
        manifest="results/models/{model}/manifest.json",
    output:
        clues="results/clues/{model}/{variant}/{experiment}.parquet",
        summary="results/clues/{model}/{variant}/{experiment}.summary.json",
        timing="results/clues/{model}/{variant}/{experiment}.timing.tsv",
    params:
        generation=config["generation"],
        load=load_options,
    log:
        "results/logs/generate_clues/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/generate_clues/{model}/{variant}/{experiment}.tsv"
    threads: MODEL_THREADS
    resources:
        **model_resources("generate_clues"),
    script:
        "../scripts/generate_clues.py"


rule clue_table:
    input:
        clues="results/clues/{model}/{variant}/{experiment}.parquet",
    output:
        csv="results/tables/{model}/{variant}/{experiment}_clues.csv",
        markdown="results/tables/{model}/{variant}/{experiment}_clues.md",
    log:
        "results/logs/clue_table/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/clue_table/{model}/{variant}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/clue_table.py"


rule clues:
    input:
        runs("results/tables/{model}/{variant}/{experiment}_clues.csv"),
        runs("results/tables/{model}/{variant}/{experiment}_clues.md"),
