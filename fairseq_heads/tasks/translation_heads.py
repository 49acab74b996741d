"""`translation_heads`: fairseq's translation task with head masks and a per-head gate trace."""
from dataclasses import dataclass

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from .head_hooks import (  # noqa: F401  (gate_record, trim_gate_trace: public names of this task)
    HeadHooksConfig,
    HeadHooksMixin,
    gate_record,
    trim_gate_trace,
)


@dataclass
class TranslationHeadsConfig(TranslationConfig, HeadHooksConfig):
    pass


@register_task("translation_heads", dataclass=TranslationHeadsConfig)
class TranslationHeadsTask(HeadHooksMixin, TranslationTask):
    cfg: TranslationHeadsConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self._init_head_hooks()
