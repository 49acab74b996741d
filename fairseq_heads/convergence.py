"""When has an L0 fine-tune converged? The stopping rule of the recipes' converged protocol, as
a pure function of the validations so far (the fairseq hook is tasks/head_hooks.py).

The rule: training has converged at a validation when, for the last N validations in a row,
each one left the number of open heads (the head-keeping rule, gating/head_target.py) exactly
as the validation before it did and moved the valid loss by less than `loss_tolerance` of the
previous loss (relative). So the rule needs N + 1 validations and fires first at the N+1-th;
any change of the open heads starts the count again.

Why both: the gates can stop moving while the rest of the network still adapts to the heads it
lost (the loss still falls), and the loss can be flat for a while before one more head goes.
"""
import json
import math
import os
from typing import List, NamedTuple, Optional, Sequence

DEFAULT_LOSS_TOLERANCE = 0.005  # 0.5% relative change of the valid loss


class Validation(NamedTuple):
    update: int                  # training updates done when the validation ran
    loss: float                  # the valid loss (of an L0 run: with the penalty, the objective)
    open_heads: Optional[int]    # heads kept by the head-keeping rule; None: an ungated model
    expected_l0: Optional[float] = None  # the penalty's Σ P(open), for the record only


def check_rule(validations: int, loss_tolerance: float) -> None:
    if validations < 1:
        raise ValueError(f"the plateau needs at least 1 validation, got {validations}")
    if not (loss_tolerance >= 0 and math.isfinite(loss_tolerance)):
        raise ValueError(f"the loss tolerance must be a finite number >= 0, got {loss_tolerance}")


def unchanged(previous: Validation, current: Validation, loss_tolerance: float) -> bool:
    """Same open heads and a relative valid-loss change below the tolerance."""
    if previous.open_heads != current.open_heads:
        return False
    change = abs(current.loss - previous.loss)
    return change < loss_tolerance * abs(previous.loss) or change == 0


def converged_at(records: Sequence[Validation], validations: int,
                 loss_tolerance: float = DEFAULT_LOSS_TOLERANCE) -> Optional[int]:
    """The index of the first record at which the rule holds (see the module docstring), or
    None if it never does."""
    check_rule(validations, loss_tolerance)
    in_a_row = 0
    for index in range(1, len(records)):
        in_a_row = in_a_row + 1 if unchanged(records[index - 1], records[index], loss_tolerance) else 0
        if in_a_row >= validations:
            return index
    return None


def describe_rule(validations: int, loss_tolerance: float) -> str:
    return (f"{validations} consecutive validations without a change of the open heads and with "
            f"< {loss_tolerance:.2%} relative valid-loss change")


# ------------------------------------------------------------------ the validation trace file
# One JSON line per validation ({"update", "loss", "open_heads", "expected_l0"}), appended by
# the task hook; it is the rule's memory across a resumed run and the step's record of updates.


def read_validations(path: str) -> List[Validation]:
    """The records of a validation trace; a line cut short by a kill is skipped."""
    records = []
    if not os.path.isfile(path):
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                item = json.loads(line)
                records.append(Validation(int(item["update"]), float(item["loss"]),
                                          item.get("open_heads"), item.get("expected_l0")))
            except (ValueError, KeyError, TypeError):
                pass
    return records


def validation_line(record: Validation) -> str:
    return json.dumps(record._asdict()) + "\n"


def best_validation(records: Sequence[Validation]) -> Optional[Validation]:
    """The validation with the lowest loss, the last of equals: where fairseq's checkpoint_best.pt
    was last saved (it saves on a loss <= the best, the loss rounded to 3 decimals as logged, while
    its patience counts only a loss < the best)."""
    return min(reversed(records), key=lambda r: r.loss) if records else None


def phase_summary(records: Sequence[Validation], validations: Optional[int] = None,
                  loss_tolerance: float = DEFAULT_LOSS_TOLERANCE) -> dict:
    """One training phase in numbers, from its validation records: the updates it ran (its last
    validation: fairseq validates when it stops), the update and loss of its best validation,
    and, with `validations` (the plateau rule's N), the update at which the rule held (None: it
    never did, the phase ran into its update cap)."""
    if not records:
        raise ValueError("no validation records")
    best = best_validation(records)
    summary = {"updates": records[-1].update, "validations": len(records),
               "best_update": best.update, "best_loss": best.loss,
               "open_heads": records[-1].open_heads}
    if validations is not None:
        index = converged_at(records, validations, loss_tolerance)
        summary["converged_at"] = None if index is None else records[index].update
        summary["rule"] = describe_rule(validations, loss_tolerance)
    return summary
