"""Evaluation as stages on the runner: items → subsets marked → predictions (an expand stage).

`MarkEvalSubsets` (global) picks the fixed-seed generation and log-likelihood subsets exactly as
`items.sample_items` does on the whole release; `PredictItems` turns each item into its
prediction rows — per model: generation in the original and the swapped order, and the two
log-likelihood methods — so a killed evaluation resumes at the partitions it had not finished and
`piqaforge lineage` leads from any prediction to its item.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from transforms.core import columns as C
from transforms.core.creating import ExpandStage
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, put_column
from transforms.eval import items as I
from transforms.llm.asking import Asker
from transforms.llm.base import EngineConfig, GenerationParams, LLMEngine, build_engine

IN_GENERATE, IN_LOGLIK = "_eval_generate", "_eval_loglik"


def subset_mask(n: int, limit: int | None, seed: int) -> np.ndarray:
    """The rows `items.sample_items(table, limit, seed)` picks, as a mask over n rows."""
    mask = np.zeros(n, dtype=bool)
    if limit is None or limit >= n:
        mask[:] = True
        return mask
    rng = np.random.default_rng(seed)
    mask[np.sort(rng.choice(n, size=limit, replace=False))] = True
    return mask


class MarkEvalSubsets(GlobalStage):
    """Mark which items each method scores (fixed-seed subsets of the whole release)."""

    name: ClassVar[str] = "mark_subsets"
    writes: ClassVar[tuple[str, ...]] = (IN_GENERATE, IN_LOGLIK)
    generate_limit: int | None = None
    loglik_limit: int | None = None
    seed: int = 0

    def process_table(self, table: pa.Table) -> pa.Table:
        n = table.num_rows
        out = put_column(table, IN_GENERATE, pa.array(subset_mask(n, self.generate_limit, self.seed)))
        return put_column(out, IN_LOGLIK, pa.array(subset_mask(n, self.loglik_limit, self.seed)))


class PredictDrops(DropReason):
    NOT_SAMPLED = "not_sampled", "the item is in neither the generation nor the log-likelihood sample"


class PredictItems(ExpandStage[PredictDrops]):
    """Each item → its prediction rows for every model, method and order (no rows: `not_sampled`)."""

    name: ClassVar[str] = "predict"
    reads: ClassVar[tuple[str, ...]] = (I.GOAL, I.SOL1, I.SOL2, I.LABEL, IN_GENERATE, IN_LOGLIK)
    stateful: ClassVar[bool] = True
    empty_reason: ClassVar[str] = PredictDrops.NOT_SAMPLED

    engines: dict[str, EngineConfig] = Field(default_factory=dict, description="Model name → engine config.")
    modes: list[str] = Field(default_factory=lambda: ["generate", "loglik"])
    swap: bool = True
    generation: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=8))
    prompts: dict[str, str] = Field(default_factory=dict)
    answer_cue: bool = True
    norm: str = "chars"
    batch_size: int = 8
    inherit_columns: bool = False
    cache_dir: str | None = Field(None, description="Answer cache of the evaluated models (transforms/flow/evaluate.py: "
                                  "<run>/cache/llm, so a resumed run asks only what was not answered); "
                                  "unset: in memory.")

    _engines: dict[str, LLMEngine] = PrivateAttr(default_factory=dict)
    _askers: dict[str, Asker] = PrivateAttr(default_factory=dict)
    _requests_dir: str | None = PrivateAttr(None)

    def record_requests_to(self, folder: str | None) -> None:
        """The evaluated models' HTTP requests are accounted like any LLM stage's (transforms/core/accounting.py)."""
        self._requests_dir = folder
        for asker in self._askers.values():
            asker.record_requests_to(folder)

    def attach_engines(self, engines: dict[str, LLMEngine]) -> PredictItems:
        """Engines built by the caller (not yet set up); they load their weights in `setup()`."""
        self._engines = dict(engines)
        return self

    def setup(self) -> None:
        # Each model is asked through the LLM base; its engine loads at the first question the
        # answer cache cannot answer.
        for name, cfg in self.engines.items():
            engine = self._engines.get(name) or build_engine(cfg)
            self._engines[name] = engine
            self._askers[name] = Asker.for_engine(engine, label=name, chunk_size=self.batch_size,
                                                  cache_dir=self.cache_dir)
            self._askers[name].record_requests_to(self._requests_dir)

    @property
    def questions(self) -> dict[str, Any]:
        """Per model, the questions asked (prompt ref → first conversation or context)."""
        return {name: asker.questions for name, asker in self._askers.items()}

    def expand(self, batch: pa.Table) -> pa.Table:
        from transforms.eval.evaluator import ORIGINAL, SWAPPED, generate_predictions, loglik_predictions
        from transforms.eval.templates import load_loglik_contexts

        index = {item_id: i for i, item_id in enumerate(batch.column(C.ID).to_pylist())}
        tables: list[pa.Table] = []
        gen_rows = batch.filter(pc.equal(batch.column(IN_GENERATE), True))
        ll_rows = batch.filter(pc.equal(batch.column(IN_LOGLIK), True))
        contexts = load_loglik_contexts()
        for model, engine in self._askers.items():
            if "generate" in self.modes and gen_rows.num_rows:
                cues = contexts if self.answer_cue else None
                variants = [(ORIGINAL, gen_rows)] + ([(SWAPPED, I.swap_solutions(gen_rows))] if self.swap else [])
                for variant, table in variants:
                    tables.append(generate_predictions(engine, table, model=model, params=self.generation,
                                                       prompts=self.prompts, variant=variant,
                                                       batch_size=self.batch_size, cues=cues))
            if "loglik" in self.modes and ll_rows.num_rows:
                tables.append(loglik_predictions(engine, ll_rows, model=model, contexts=contexts, norm=self.norm,
                                                 batch_size=self.batch_size))
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return pa.table({"_parent": pa.array([], pa.int64())})
        preds = pa.concat_tables(tables, promote_options="default")
        parents = [index[i] for i in preds.column(I.ID).to_pylist()]
        preds = preds.rename_columns(["item_id" if c == I.ID else c for c in preds.schema.names])
        return preds.append_column("_parent", pa.array(parents, pa.int64()))

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._askers.clear()


def predictions_for_summary(table: pa.Table) -> pa.Table:
    """The predictions as the evaluator's summary reads them: the item id back in `id`."""
    drop = [c for c in (C.ID, C.PARENT_ID, C.STATUS, C.DROP_REASON, C.DROP_STAGE, "_born") if c in table.schema.names]
    out = table.drop_columns(drop)
    return out.rename_columns([I.ID if c == "item_id" else c for c in out.schema.names])


def prediction_order(table: pa.Table) -> Any:
    """A stable order for the predictions file: model, method, variant, then item order."""
    keys = [(c, "ascending") for c in ("model", "method", "variant") if c in table.schema.names]
    return table.sort_by(keys) if keys else table
