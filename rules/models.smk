# Model preparation: the embedded GGUF dequantized and cached as safetensors, tiny random
# models built from their seed, hub/local models recorded (see attnscope.models).


rule prepare_model:
    output:
        manifest=attnscope_paths.MANIFEST,
    params:
        spec=lambda wc: attnscope_config.model_build_spec(model_spec(wc)),
    log:
        "results/logs/prepare_model/{model}.log",
    benchmark:
        "results/benchmarks/prepare_model/{model}.tsv"
    threads: MODEL_THREADS
    resources:
        **model_resources("prepare_model"),
    script:
        "../scripts/prepare_model.py"
