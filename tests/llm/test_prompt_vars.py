"""A classifier's prompt may read variables besides the row's text (`prompt_vars`): classify_piqa/any names the
crawl's language, so the ensemble's vote works for a language with no prompt of its own."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from transforms.judge.ensemble import EnsembleClassify
from transforms.llm.classifier import Classifier


def test_a_prompt_variable_the_classifier_does_not_give_is_refused_naming_it():
    with pytest.raises(ValidationError) as err:
        Classifier(name="vote-th", prompt="classify_piqa/any")
    text = str(err.value)
    assert "'vote-th'" in text and "classify_piqa/any" in text and "language" in text and "prompt_vars" in text
    Classifier(name="vote-ko", prompt="classify_piqa/ko")  # the row's text alone: nothing to give


def test_the_language_reaches_the_prompt_and_the_question_it_is_asked():
    thai, hindi = (Classifier(name="vote", prompt="classify_piqa/any", prompt_vars={"language": lang})
                   for lang in ("Thai", "Hindi"))
    prompt = thai.load_prompt()
    system = prompt.render(**thai.prompt_vars, text="x").messages[0]["content"]
    assert system.startswith("You sort questions written in Thai.")
    # the answer cache is keyed by the conversation: another language is another question, never a cached answer
    from transforms.llm.cache import answer_key

    params = thai.gen_params(0.7) | {"options": prompt.options}
    keys = {answer_key(c.load_prompt().render(**c.prompt_vars, text="วิธีล้างกระทะ").messages, c.engine, params, 0)
            for c in (thai, hindi)}
    assert len(keys) == 2


def test_an_ensemble_member_with_prompt_vars_loads_from_a_recipe_stage_config():
    stage = EnsembleClassify.model_validate({"classifiers": [
        {"name": "vote-th", "prompt": "classify_piqa/any", "prompt_vars": {"language": "Thai"}}]})
    assert stage.classifiers[0].prompt_vars == {"language": "Thai"}
