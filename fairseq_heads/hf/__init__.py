"""Hugging Face LLaMA-family checkpoints <-> `gated_llama`: reading and checking config.json
(hf_config), the tokenizer's vocabulary as a fairseq dictionary (vocabulary), the weights
(import_hf). `transformers` is not needed here (only the tests compare with it); safetensors and
tokenizer files are read directly."""
