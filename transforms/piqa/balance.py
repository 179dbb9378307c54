"""Label balance: the one stage every recipe uses to put the correct solution in each slot half the time.

The position of the correct answer carries no meaning, and a generator's habit of putting it first
must not become a shortcut for the model under test. `BalanceLabels` swaps the two solutions (and
flips the label) of as few items as needed for the share of label 1 to be as close to one half as the
count allows: exactly 50/50 for an even count, within one item for an odd one.

The release gates check that share against bounds (0.45-0.55 in every suite). An odd count can miss
them whatever is swapped (4 of 9 is 0.44, 5 of 9 is 0.56; from 11 items up 5 of 11 = 0.45 is inside),
so when no split of an odd count lands inside the bounds, one item is dropped as `label_balance_odd`
(marked, not deleted: it goes to `rejected/` with that reason).

Which items are swapped, and which one is dropped, is decided by a seeded hash of the item id, so the
result does not depend on the order of the rows.
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import xxhash
from pydantic import Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, put_column
from transforms.piqa.positions import POSITION_PAIRS, swap_solutions

SWAPPED = "solutions_swapped"
# Every column that refers to a solution by position (the two solutions, glosses, reviewers' verdicts,
# the label ...) is declared in transforms/piqa/positions.py and moved by its one helper.
SWAP_PAIRS = POSITION_PAIRS


class BalanceDrops(DropReason):
    LABEL_BALANCE_ODD = "label_balance_odd", "the one item left over so that label 0 and 1 are equal in number"


ODD_REASON = BalanceDrops.LABEL_BALANCE_ODD


class BalanceLabels(GlobalStage[BalanceDrops]):
    """Swap the solutions of the fewest items (with every position-dependent column: label, `correct`,
    glosses, reviewers' verdicts; transforms/piqa/positions.py) so that half
    of the labels are 1, within one item; drop one item (`label_balance_odd`) from an odd count that no
    split can bring inside [`min_share`, `max_share`]. `solutions_swapped` records each swap."""

    name: ClassVar[str] = "balance_labels"
    reads: ClassVar[tuple[str, ...]] = (C.ID, "label")
    writes: ClassVar[tuple[str, ...]] = (SWAPPED,)

    seed: int = Field(0, description="Seed of the id hash that orders the items to swap and picks the odd one.")
    min_share: float = Field(0.45, ge=0, le=0.5, description="The release suite's lower bound on the share "
                             "of label 1; with `max_share` it decides when an odd count must lose an item.")
    max_share: float = Field(0.55, ge=0.5, le=1, description="The release suite's upper bound on the share of "
                             "label 1.")

    def inside(self, ones: int, n: int) -> bool:
        return n > 0 and self.min_share <= ones / n <= self.max_share

    def _rank(self, item_id: str) -> int:
        return xxhash.xxh3_64_intdigest(f"{self.seed}\x1f{item_id}".encode())

    def process_table(self, table: pa.Table) -> pa.Table:
        n = table.num_rows
        labels = table.column("label").to_pylist()
        ids = [str(v) for v in table.column(C.ID).to_pylist()]
        order = sorted(range(n), key=lambda i: (self._rank(ids[i]), ids[i]))
        # the two splits nearest one half; any split inside the bounds makes one of them inside too
        if n % 2 and not any(self.inside(k, n) for k in (n // 2, n // 2 + 1)):
            odd, order = order[-1], order[:-1]
        else:
            odd = None
        m = len(order)
        targets = [k for k in (m // 2, (m + 1) // 2) if self.inside(k, m)] or [m // 2]
        ones = sum(1 for i in order if labels[i] == 1)
        if ones < min(targets):
            flip_from, need = 0, min(targets) - ones
        else:
            flip_from, need = 1, max(0, ones - max(targets))
        swap = set([i for i in order if labels[i] == flip_from][:need])  # the first in the hash order
        mask = pa.array([i in swap for i in range(n)], pa.bool_())

        out = put_column(swap_solutions(table, mask), SWAPPED, mask)
        if odd is None:
            return out
        return self.drop(out, [ODD_REASON if i == odd else None for i in range(n)])
