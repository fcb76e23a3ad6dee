# Few-shot prompts per experiment, rendered with each model's chat template.


rule build_prompts:
    input:
        clues=attnscope_paths.IMPORTED_CLUES,
        manifest=attnscope_paths.MANIFEST,
        target_files=lambda wc: experiment_plan(wc).target_files,
    output:
        prompts=attnscope_paths.PROMPTS,
    params:
        experiment=lambda wc: experiment_plan(wc).prompt_spec,
        targets=lambda wc: experiment_plan(wc).targets,
        prompt_format=lambda wc: experiment_plan(wc).prompt_format,
        chat_template=lambda wc: model_spec(wc)["chat_template"],
    log:
        "results/logs/build_prompts/{model}/{experiment}.log",
    benchmark:
        "results/benchmarks/build_prompts/{model}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=2000, runtime=10),
    script:
        "../scripts/build_prompts.py"


rule prompts:
    input:
        sorted(set(runs(attnscope_paths.PROMPTS))),
