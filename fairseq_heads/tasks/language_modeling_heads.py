"""`language_modeling_heads`: fairseq's language_modeling task with head masks and a gate trace."""
from dataclasses import dataclass

from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from .head_hooks import HeadHooksConfig, HeadHooksMixin


@dataclass
class LanguageModelingHeadsConfig(LanguageModelingConfig, HeadHooksConfig):
    pass


@register_task("language_modeling_heads", dataclass=LanguageModelingHeadsConfig)
class LanguageModelingHeadsTask(HeadHooksMixin, LanguageModelingTask):
    cfg: LanguageModelingHeadsConfig

    def __init__(self, args, dictionary, output_dictionary=None, targets=None):
        super().__init__(args, dictionary, output_dictionary, targets)
        self._init_head_hooks()
