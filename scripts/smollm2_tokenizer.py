"""Rule smollm2_tokenizer: SmolLM2's tokenizer from the embedded GGUF → results/tokenizers/smollm2/
(what the tiny random models that use it read: the GGUF's vocabulary is read once per run)."""

from pathlib import Path

from attnscope import io, prepared

log = io.setup_script_logging(snakemake.log[0])
with io.atomic_path(Path(snakemake.output[0])) as tmp:
    prepared.smollm2_tokenizer(snakemake.input.gguf).save_pretrained(tmp)
log.info("SmolLM2's tokenizer from %s written to %s", snakemake.input.gguf, snakemake.output[0])
