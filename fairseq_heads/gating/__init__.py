"""Head gates at training and inference time: Hard Concrete gates (hard_concrete), the gated
attention block (gated_attention; its tensor arithmetic: attention_tensors), the head-keeping rule and --target-heads' top-K
(head_target), fixed head masks (head_masks) and a checkpoint's gate table (gate_table).
Below models/: nothing here imports a model, the statistics or pruning."""
