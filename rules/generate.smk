# Greedy clue generation per model variant and experiment, and the clue tables (A.1-A.3).


rule generate_clues:
    input:
        prompts=attnscope_paths.PROMPTS,
        manifest=attnscope_paths.MANIFEST,
    output:
        clues=attnscope_paths.CLUES,
        summary=attnscope_paths.CLUE_SUMMARY,
        timing=attnscope_paths.CLUE_TIMING,
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
    localrule: True
    input:
        clues=attnscope_paths.CLUES,
    output:
        csv=attnscope_paths.CLUE_TABLE_CSV,
        markdown=attnscope_paths.CLUE_TABLE_MD,
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
        runs(attnscope_paths.CLUE_TABLE_CSV),
        runs(attnscope_paths.CLUE_TABLE_MD),
