"""From refined questions to PIQA items: place the two solutions, check the structure, balance labels.

* `PlaceSolutions`: (goal, solution, distractor) from the refinement → (goal, sol1, sol2, label); which
  slot holds the correct solution is decided by a hash of the row id (seeded, reproducible).
* `StructuralChecks`: both solutions present, not identical, the goal not empty; records the
  minimal-pair distance in words and characters and the lengths the card reports.
* `BalanceLabels` (global): swaps the two solutions of as few items as needed (label flipped) so the
  correct solution is in each slot for half the items, within one item.
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import xxhash
from pydantic import Field

from transforms.core import columns as C
from transforms.core.stage import GlobalStage, Stage, put_column, set_drop_reason
from transforms.piqa.textcheck import levenshtein


def word_edit_distance(a: str, b: str) -> int:
    """Levenshtein distance over whitespace words (Korean eojeol)."""
    return levenshtein(a.split(), b.split())


class PlaceSolutions(Stage):
    """goal/solution/distractor → goal/sol1/sol2/label, the correct slot chosen by a hash of the id."""

    name: ClassVar[str] = "place_solutions"
    reads: ClassVar[tuple[str, ...]] = (C.ID,)
    writes: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "label")
    prefix: str = Field("", description="Prefix of the refinement's columns (e.g. 'refined_').")
    seed: int = Field(0, description="Changes which items get the correct solution second.")

    def process(self, batch: pa.Table) -> pa.Table:
        cols = {k: batch.column(self.prefix + k).to_pylist() for k in ("goal", "solution", "distractor")}
        ids = [str(x) for x in batch.column(C.ID).to_pylist()]
        sol1, sol2, label = [], [], []
        for i, rid in enumerate(ids):
            second = xxhash.xxh3_64_intdigest(f"{self.seed}\x1f{rid}".encode()) % 2 == 1
            right, wrong = cols["solution"][i], cols["distractor"][i]
            sol1.append(wrong if second else right)
            sol2.append(right if second else wrong)
            label.append(1 if second else 0)
        out = put_column(batch, "goal", pa.array(cols["goal"], pa.string()))
        out = put_column(out, "sol1", pa.array(sol1, pa.string()))
        out = put_column(out, "sol2", pa.array(sol2, pa.string()))
        return put_column(out, "label", pa.array(label, pa.int8()))


class StructuralChecks(Stage):
    """Drop items that are not PIQA items; record the pair's distance and the lengths."""

    name: ClassVar[str] = "structural_checks"
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "label")
    writes: ClassVar[tuple[str, ...]] = ("pair_word_distance", "pair_char_distance", "goal_chars", "solution_chars")
    max_word_distance: int | None = Field(None, ge=1, description="Drop pairs further apart than this "
                                          "many words (`not_minimal_pair`); None only records the distance.")

    def process(self, batch: pa.Table) -> pa.Table:
        goals, s1, s2 = (batch.column(c).to_pylist() for c in ("goal", "sol1", "sol2"))
        labels = batch.column("label").to_pylist()
        reasons: list[str | None] = []
        words, chars, goal_len, sol_len = [], [], [], []
        for g, a, b, lab in zip(goals, s1, s2, labels, strict=True):
            g, a, b = (str(x or "").strip() for x in (g, a, b))
            wd, cd = word_edit_distance(a, b), levenshtein(a, b)
            words.append(wd)
            chars.append(cd)
            goal_len.append(len(g))
            sol_len.append((len(a) + len(b)) / 2)
            if not g:
                reasons.append("empty_goal")
            elif not a or not b:
                reasons.append("missing_solution")
            elif a == b:
                reasons.append("identical_solutions")
            elif lab not in (0, 1):
                reasons.append("invalid_label")
            elif self.max_word_distance is not None and wd > self.max_word_distance:
                reasons.append("not_minimal_pair")
            else:
                reasons.append(None)
        out = put_column(batch, "pair_word_distance", pa.array(words, pa.int32()))
        out = put_column(out, "pair_char_distance", pa.array(chars, pa.int32()))
        out = put_column(out, "goal_chars", pa.array(goal_len, pa.int32()))
        out = put_column(out, "solution_chars", pa.array(sol_len, pa.float64()))
        return set_drop_reason(out, pa.array(reasons, pa.string()))


class BalanceLabels(GlobalStage):
    """Swap the solutions of the fewest items (in id order) so labels are 50/50 within one item."""

    name: ClassVar[str] = "balance_labels"
    reads: ClassVar[tuple[str, ...]] = (C.ID, "sol1", "sol2", "label")
    writes: ClassVar[tuple[str, ...]] = ("label_swapped",)

    def process_table(self, table: pa.Table) -> pa.Table:
        labels = [int(x) for x in table.column("label").to_pylist()]
        ids = [str(x) for x in table.column(C.ID).to_pylist()]
        n, ones = len(labels), sum(labels)
        target = n // 2 if ones <= n / 2 else (n + 1) // 2  # the nearer of floor/ceil of n/2
        swap = [False] * n
        need = target - ones  # > 0: turn that many 0s into 1s
        order = sorted(range(n), key=lambda i: xxhash.xxh3_64_intdigest(ids[i].encode()))
        for i in order:
            if need == 0:
                break
            if need > 0 and labels[i] == 0:
                swap[i], need = True, need - 1
            elif need < 0 and labels[i] == 1:
                swap[i], need = True, need + 1
        s1, s2 = table.column("sol1").to_pylist(), table.column("sol2").to_pylist()
        new1 = [s2[i] if swap[i] else s1[i] for i in range(n)]
        new2 = [s1[i] if swap[i] else s2[i] for i in range(n)]
        new_labels = [1 - labels[i] if swap[i] else labels[i] for i in range(n)]
        out = put_column(table, "sol1", pa.array(new1, pa.string()))
        out = put_column(out, "sol2", pa.array(new2, pa.string()))
        out = put_column(out, "label", pa.array(new_labels, table.schema.field("label").type))
        return put_column(out, "label_swapped", pa.array(swap, pa.bool_()))
