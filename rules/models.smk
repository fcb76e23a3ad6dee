# Model preparation: the embedded GGUF dequantized and cached as safetensors, tiny random
# models built from their seed (SmolLM2's tokenizer converted from its GGUF once for those that use
# it), hub/local models recorded (see attnscope.models).


rule smollm2_tokenizer:
    input:
        gguf=lambda wc: attnscope_config.locate_gguf(attnscope_config.SMOLLM2_SOURCE),
    output:
        directory(attnscope_paths.SMOLLM2_TOKENIZER),
    log:
        "results/logs/smollm2_tokenizer.log",
    benchmark:
        "results/benchmarks/smollm2_tokenizer.tsv"
    localrule: True
    resources:
        **fixed_resources(1500, 10),
    script:
        "../scripts/smollm2_tokenizer.py"


rule prepare_model:
    input:
        unpack(lambda wc: attnscope_config.model_build_inputs(model_spec(wc))),
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
