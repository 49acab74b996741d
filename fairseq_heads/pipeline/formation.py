"""The formation curve's points: for each interval checkpoint a baseline keeps
(`train.keep_checkpoints=-1`, fairseq's checkpoint_<epoch>_<update>.pt), the head functions at that
point of training, so that the report can say when each function appears (report/formation.py reads
them). Per checkpoint, in `POINTS/<update>/`:

  stats/      `stats` with the recipe's function metrics (confidence, positional, rare) on its
              statistics subset (Europarl valid): positional, rare-word, enc-dec confidence
  syntax/     the syntactic heads on the parsed set (PUD, gold parses)
  point.json  update, epoch (updates / the epoch length read off the training log), the valid loss
              fairseq stored in the checkpoint, BLEU of the first `bleu_sentences` sentences of the
              valid set (beam `bleu_beam`), and the settings; written last: a folder without it is
              redone

Points are computed once each (a finished folder is kept), so the same call can follow a training
that still runs (a session's watcher) and, when it has stopped, finish the rest.
"""
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from typing import List, Optional, Tuple

from ..files import write_text_atomic
from ..report.formation import POINT_FILE, POINTS_FOLDER

CHECKPOINT_NAME = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
_INNER = re.compile(r"\| train_inner \| (\{.*\})\s*$")


@dataclass(frozen=True)
class FormationSettings:
    """What each point computes (also its record in point.json)."""
    source_lang: str
    target_lang: str
    subset: str = "valid"
    metrics: Tuple[str, ...] = ("confidence", "positional", "rare")
    rare_outside_top: Optional[int] = None
    replicates: int = 50
    max_tokens: int = 4096
    bleu_sentences: int = 500
    bleu_beam: int = 1
    autocast: str = "none"


def interval_checkpoints(folder: str) -> List[Tuple[int, str]]:
    """(update, path) of fairseq's interval checkpoints in `folder`, by update."""
    found = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        match = CHECKPOINT_NAME.match(name)
        if match:
            found.append((int(match.group(2)), os.path.join(folder, name)))
    return sorted(found)


def epoch_length(log_path: str) -> Optional[float]:
    """Updates per epoch, from fairseq-train's json log: its `update` field is the fractional epoch
    count (epoch - 1 + the share of the epoch done) at `num_updates`; None without such a line."""
    last = None
    if os.path.isfile(log_path):
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                match = _INNER.search(line)
                if match:
                    last = json.loads(match.group(1))
    if not last or float(last.get("update", 0)) <= 0:
        return None
    return int(last["num_updates"]) / float(last["update"])


def stored_valid_loss(checkpoint: str) -> Optional[float]:
    """The valid loss fairseq saved with the checkpoint (extra_state.val_loss)."""
    from ..checkpoints import load_checkpoint

    value = (load_checkpoint(checkpoint).get("extra_state") or {}).get("val_loss")
    return None if value is None else float(value)


def _statistics(data_bin: str, checkpoint: str, subset: str, out_dir: str, settings: FormationSettings,
                metrics: Tuple[str, ...], conllu: Optional[str] = None, rare_outside_top: Optional[int] = None):
    from ..stats import StatsOptions, compute_head_statistics, write_statistics

    options = StatsOptions(metrics=metrics, conllu=conllu, rare_outside_top=rare_outside_top,
                           replicates=settings.replicates, max_tokens=settings.max_tokens, cpu=True,
                           autocast=settings.autocast, source_lang=settings.source_lang,
                           target_lang=settings.target_lang, log_format="none")
    write_statistics(compute_head_statistics(data_bin, checkpoint, subset, options), out_dir)


def valid_sample_bleu(checkpoint: str, data_bin: str, settings: FormationSettings) -> Tuple[float, str]:
    """sacreBLEU of the first `bleu_sentences` sentences of the subset (fairseq's ids: file order)."""
    from ..bleu import corpus_bleu
    from ..checkpoints import data_overrides, load_model_and_task
    from ..precision import autocast
    from ..pruning.curve import translate

    model, task = load_model_and_task(checkpoint, data_overrides(data_bin, settings.source_lang,
                                                                 settings.target_lang))
    with autocast(settings.autocast):
        hypotheses, references = translate(model, task, settings.subset, beam=settings.bleu_beam, batch_size=64,
                                           limit=settings.bleu_sentences)
    return corpus_bleu(hypotheses, references)


def compute_point(checkpoint: str, update: int, data_bin: str, parsed_set: Optional[Tuple[str, str]],
                  out_dir: str, settings: FormationSettings, updates_per_epoch: Optional[float]) -> None:
    """One checkpoint's folder (module docstring); `parsed_set`: (data-bin, CoNLL-U) or None."""
    os.makedirs(out_dir, exist_ok=True)
    _statistics(data_bin, checkpoint, settings.subset, os.path.join(out_dir, "stats"), settings,
                settings.metrics, rare_outside_top=settings.rare_outside_top)
    if parsed_set is not None:
        _statistics(parsed_set[0], checkpoint, "test", os.path.join(out_dir, "syntax"), settings, ("syntactic",),
                    conllu=parsed_set[1])
    bleu, signature = valid_sample_bleu(checkpoint, data_bin, settings)
    point = {"update": update, "epoch": update / updates_per_epoch if updates_per_epoch else None,
             "valid_loss": stored_valid_loss(checkpoint), "bleu": bleu, "sacrebleu_signature": signature,
             "checkpoint": os.path.basename(checkpoint), "settings": asdict(settings)}
    write_text_atomic(os.path.join(out_dir, POINT_FILE), json.dumps(point, indent=1) + "\n")


def _same_settings(point_dir: str, settings: FormationSettings) -> bool:
    with open(os.path.join(point_dir, POINT_FILE), encoding="utf-8") as f:
        return json.load(f).get("settings") == json.loads(json.dumps(asdict(settings)))


def formation_points(checkpoint_dir: str, points_dir: str, data_bin: str, parsed_set: Optional[Tuple[str, str]],
                     settings: FormationSettings, training_log: str, every: int = 1, progress=print) -> List[int]:
    """Compute the points of `checkpoint_dir`'s interval checkpoints not yet in `points_dir` (every
    `every`-th checkpoint); returns the updates computed now."""
    done = []
    updates_per_epoch = epoch_length(training_log)
    for index, (update, checkpoint) in enumerate(interval_checkpoints(checkpoint_dir)):
        out_dir = os.path.join(points_dir, str(update))
        if index % every or (os.path.isfile(os.path.join(out_dir, POINT_FILE)) and _same_settings(out_dir, settings)):
            continue
        shutil.rmtree(out_dir, ignore_errors=True)  # a point cut short is redone whole
        compute_point(checkpoint, update, data_bin, parsed_set, out_dir, settings, updates_per_epoch)
        done.append(update)
        if progress:
            progress(f"formation: point at update {update} done")
    return done


# ---------------------------------------------------------------- the recipe's step


def formation_settings(config) -> FormationSettings:
    """The translation recipe's formation settings (NmtRecipe: data, stats, formation, autocast)."""
    f = config.formation
    return FormationSettings(source_lang=config.data.src, target_lang=config.data.tgt, subset=config.stats.subset,
                             rare_outside_top=config.stats.rare_outside_top or None, replicates=f.replicates,
                             max_tokens=config.stats.max_tokens, bleu_sentences=f.bleu_sentences,
                             bleu_beam=f.bleu_beam, autocast=config.autocast)


def write_formation(points_dir: str, out_dir: str) -> None:
    """formation.csv, formation.md (the table and its verdict) and formation.png of the points so far."""
    from ..report.formation import formation_csv, formation_markdown, formation_rows, formation_verdict, plot_formation

    rows = formation_rows(points_dir)
    os.makedirs(out_dir, exist_ok=True)
    write_text_atomic(os.path.join(out_dir, "formation.csv"), formation_csv(rows))
    write_text_atomic(os.path.join(out_dir, "formation.md"), formation_markdown(rows) + "\n" + formation_verdict(rows) + "\n")
    plot_formation(rows, os.path.join(out_dir, "formation.png"))


def formation_step(nmt, syntax_data: str):
    """The `formation` step of a translation recipe (NmtSteps `nmt`): every point of the baseline's
    kept checkpoints, then the table and figure."""
    from .runner import Step

    c, s = nmt.c, nmt.suffix
    settings = formation_settings(c)

    def call(context) -> None:
        parsed_bin, conllu = nmt.parsed_set(context)
        points = context.path(f"{POINTS_FOLDER}{s}")
        formation_points(context.path(f"models/baseline{s}"), points, nmt.data_bin(context), (parsed_bin, conllu),
                         settings, context.path(f"logs/baseline{s}.log"), every=c.formation.every)
        write_formation(points, context.out)

    return Step(f"formation{s}", f"formation{s}", {"points": asdict(settings), "every": c.formation.every},
                inputs=("data", syntax_data, f"baseline{s}"), call=call)
