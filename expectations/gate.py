"""The release gate: a recipe's suite (expectations/suites/*.yaml) run with Great Expectations 1.x.

    result = run_gate(items, load_suite("j-piqa"))
    result.success, result.reasons()   # one line per failed expectation, naming the rows

Built-in expectations cover schema, types, nulls, labels, balance and the column pair; the checks
GE lacks are computed first as boolean columns (expectations/checks.py). Great Expectations runs
in an ephemeral context (nothing written to disk) and is imported only here, inside `run_gate`.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, Field

from expectations.checks import Derived, derive
from expectations.suite import SuiteConfig
from transforms.piqa.schema import ITEM_SCHEMA, conform_items

MAX_IDS = 50  # failing ids kept per check in the report


class CheckResult(BaseModel):
    name: str
    expectation: str
    description: str
    success: bool
    column: str | None = None
    observed: Any = None
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    failing_ids: list[str] = Field(default_factory=list)
    examples: dict[str, str] = Field(default_factory=dict, description="Failing id → why (computed checks "
                                     "that know, e.g. the repeated n-gram of degenerate text).")
    error: str | None = None

    def reason(self) -> str:
        if self.expectation == "expect_column_to_exist":
            return f"{self.name}: column {self.column!r} is missing"
        if self.error:
            return f"{self.name}: {self.error}"
        text = f"{self.name}: {self.description}"
        if self.unexpected_count:
            ids = ", ".join(self.failing_ids[:5])
            more = f" (+{self.unexpected_count - 5} more)" if self.unexpected_count > 5 else ""
            pct = f" ({self.unexpected_percent:.1f}%)" if self.unexpected_percent is not None else ""
            why = "; e.g. " + "; ".join(f"{k}: {v}" for k, v in list(self.examples.items())[:3]) \
                if self.examples else ""
            return f"{text} — {self.unexpected_count} row(s) fail{pct}: {ids}{more}{why}"
        if self.observed is not None:
            return f"{text} — observed {self.observed}"
        return f"{text} — failed"


class GateResult(BaseModel):
    suite: str
    success: bool
    rows: int
    checks: list[CheckResult]
    great_expectations: str = ""

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.success]

    def reasons(self) -> list[str]:
        return [c.reason() for c in self.failures()]


def to_frame(table: pa.Table) -> pd.DataFrame:
    """pandas frame for GE: strings as Python objects (per-value type checks, None for nulls)."""
    data: dict[str, Any] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_boolean(col.type):
            data[name] = pd.Series(col.to_pylist(), dtype=object)
        else:
            data[name] = col.to_pandas()
    return pd.DataFrame(data, index=pd.RangeIndex(table.num_rows))


def _type_list(dtype: pa.DataType) -> list[str] | None:
    if pa.types.is_string(dtype):
        return ["str"]
    if pa.types.is_integer(dtype):
        return ["int64", "Int64", "int32", "int16", "int8"]
    if pa.types.is_boolean(dtype):
        return ["bool", "boolean"]
    return None


def run_gate(table: pa.Table, suite: SuiteConfig) -> GateResult:
    """Validate `table` against `suite`; never raises on bad data, only reports it."""
    pre: list[CheckResult] = []
    try:
        table = conform_items(table, fill_optional=False)
    except ValueError as err:
        pre.append(CheckResult(name="types", expectation="conform_items", description="columns have schema types",
                               success=False, error=str(err)))
    df = to_frame(table)
    derived = derive(df, suite)
    gx_version, results = _validate(df, suite, derived)
    for r in results:  # computed checks that know why a row failed say so in the report
        examples = next((d.details.get("examples") for d in derived if d.name == r.name), None)
        if examples and not r.success:
            r.examples = dict(list(examples.items())[:MAX_IDS])
    checks = pre + results
    for d in derived:
        if d.error:
            checks.append(CheckResult(name=d.name, expectation="computed check", description=d.description,
                                      success=d.error.startswith("skipped"), error=d.error))
    return GateResult(suite=suite.name, success=all(c.success for c in checks) and not _missing_required(df, suite),
                      rows=len(df), checks=checks, great_expectations=gx_version)


def _missing_required(df: pd.DataFrame, suite: SuiteConfig) -> list[str]:
    return [c for c in suite.required_columns if c not in df.columns]


def _plan(df: pd.DataFrame, suite: SuiteConfig, derived: list[Derived]) -> list[tuple[str, str, Any]]:
    """(check name, description, expectation) in report order; only for columns that exist."""
    import great_expectations.expectations as gxe

    have = set(df.columns)
    plan: list[tuple[str, str, Any]] = [("non_empty", "the table has rows", gxe.ExpectTableRowCountToBeBetween(min_value=1))]
    needed = list(dict.fromkeys(suite.required_columns + [c for d in derived for c in d.needs]))
    for col in needed:
        plan.append((f"column_exists:{col}", f"column {col!r} is present", gxe.ExpectColumnToExist(column=col)))
    for field in ITEM_SCHEMA:
        types = _type_list(field.type)
        if field.name in have and types and (field.name in needed or df[field.name].notna().any()):
            plan.append((f"type:{field.name}", f"{field.name} values are {field.type}",
                         gxe.ExpectColumnValuesToBeInTypeList(column=field.name, type_list=types)))
    for col in ("id", "lang", "goal", "sol1", "sol2", "label"):
        if col in have:
            plan.append((f"not_null:{col}", f"{col} is set", gxe.ExpectColumnValuesToNotBeNull(column=col)))
    for col in ("goal", "sol1", "sol2"):
        if col in have:
            plan.append((f"not_empty:{col}", f"{col} is not empty",
                         gxe.ExpectColumnValueLengthsToBeBetween(column=col, min_value=1)))
    if "id" in have:
        plan.append(("unique_ids", "ids are unique", gxe.ExpectColumnValuesToBeUnique(column="id")))
    if "label" in have:
        plan.append(("label_values", "label is 0 or 1", gxe.ExpectColumnValuesToBeInSet(column="label", value_set=[0, 1])))
        if suite.label_balance and pd.api.types.is_numeric_dtype(df["label"]):
            lb = suite.label_balance
            plan.append(("label_balance", f"share of label 1 within [{lb.min:.2f}, {lb.max:.2f}]",
                         gxe.ExpectColumnMeanToBeBetween(column="label", min_value=lb.min, max_value=lb.max)))
    if "lang" in have and suite.languages:
        plan.append(("language_code", f"lang in {suite.languages}",
                     gxe.ExpectColumnValuesToBeInSet(column="lang", value_set=list(suite.languages))))
    if {"sol1", "sol2"} <= have:
        plan.append(("solutions_differ", "sol1 != sol2",
                     gxe.ExpectSelectColumnValuesToBeUniqueWithinRecord(column_list=["sol1", "sol2"])))
    for d in derived:
        if d.error or d.column not in df.columns:
            continue
        if d.column == "_item_key":
            exp = gxe.ExpectColumnValuesToBeUnique(column=d.column)
        else:
            exp = gxe.ExpectColumnValuesToBeInSet(column=d.column, value_set=[True], mostly=d.mostly)
        plan.append((d.name, d.description, exp))
    if suite.solution_pattern:
        for col in ("sol1", "sol2"):
            if col in have:
                plan.append((f"pattern:{col}", f"{col} matches {suite.solution_pattern!r}",
                             gxe.ExpectColumnValuesToMatchRegex(column=col, regex=suite.solution_pattern)))
    return plan


def _validate(df: pd.DataFrame, suite: SuiteConfig, derived: list[Derived]) -> tuple[str, list[CheckResult]]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        for name in ("great_expectations", "great_expectations.data_context.types.base"):
            logging.getLogger(name).setLevel(logging.WARNING)

        plan = _plan(df, suite, derived)
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        batch = (context.data_sources.add_pandas("items").add_dataframe_asset("items")
                 .add_batch_definition_whole_dataframe("all_rows"))
        gx_suite = context.suites.add(gx.ExpectationSuite(name=suite.name))
        for name, _, expectation in plan:
            expectation.meta = {"check": name}
            gx_suite.add_expectation(expectation)
        validation = context.validation_definitions.add(
            gx.ValidationDefinition(data=batch, suite=gx_suite, name=f"{suite.name}-release-gate"))
        result_format: dict[str, Any] = {"result_format": "COMPLETE"}
        if "id" in df.columns:
            result_format["unexpected_index_column_names"] = ["id"]
        run = validation.run(batch_parameters={"dataframe": df}, result_format=result_format)
    by_check = {r.expectation_config.meta.get("check"): r for r in run.results}
    out = []
    for name, description, expectation in plan:
        r = by_check.get(name)
        out.append(_to_check(name, description, expectation, r))
    return gx.__version__, out


def _to_check(name: str, description: str, expectation: Any, r: Any) -> CheckResult:
    column = getattr(expectation, "column", None)
    if r is None:
        return CheckResult(name=name, expectation=expectation.expectation_type, description=description,
                           success=False, column=column, error="no result from Great Expectations")
    d = r.to_json_dict()
    res = d.get("result") or {}
    info = d.get("exception_info") or {}
    messages = [v.get("exception_message") for v in info.values() if isinstance(v, dict)] \
        if "raised_exception" not in info else [info.get("exception_message")]
    error = next((m for m in messages if m), None)
    ids: list[str] = []
    for item in (res.get("unexpected_index_list") or [])[:MAX_IDS]:
        ids.append(f"id={item['id']}" if isinstance(item, dict) and "id" in item else f"row {item}")
    observed = res.get("observed_value")
    if isinstance(observed, float):
        observed = round(observed, 4)
    return CheckResult(name=name, expectation=d["expectation_config"]["type"], description=description,
                       success=bool(d["success"]), column=column, observed=observed,
                       unexpected_count=res.get("unexpected_count"),
                       unexpected_percent=res.get("unexpected_percent"), failing_ids=ids,
                       error=None if d["success"] else error)
