"""Hugging Face checkpoints <-> fairseq models. LLaMA-family decoders <-> `gated_llama`: reading
and checking config.json (hf_config), the tokenizer's vocabulary as a fairseq dictionary
(vocabulary), the weights (import_hf, export_hf). Translation models (Marian, FSMT, M2M100) <->
`gated_transformer`: translation_config, translation_vocabulary, import_translation,
export_translation. `transformers` is not needed here (only the tests compare with it);
safetensors, tokenizer and vocabulary files are read directly."""
