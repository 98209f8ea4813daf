"""The public API's functions (specviz/ui/api.py), without a server: plain data, checked input."""

import pytest

from specviz.decoding.trace import Comparison
from specviz.errors import SpecVizError
from specviz.pair.presets import PRESETS
from specviz.ui import api
from specviz.ui.files import load_examples


def test_presets_list_every_pair_with_its_models():
    listed = api.presets()
    assert [p["name"] for p in listed] == list(PRESETS)
    assert all({"name", "description", "target", "draft", "offline", "kind", "setup"} == set(p) for p in listed)
    assert {p["name"] for p in listed if p["kind"] == "bundled"} == {"smollm2-135m-int8", "smollm2-135m-bf16"}
    (real,) = [p for p in listed if p["kind"] == "offline after set-up"]
    assert real["offline"] and real["setup"] == "scripts/setup.sh --real-pair"


def test_examples_come_by_name_as_the_comparison_json():
    names = [e["name"] for e in api.examples()]
    assert names == [e.name for e in load_examples()] and names
    stored = api.example(names[0])
    assert Comparison.from_dict(stored).to_dict() == stored
    with pytest.raises(SpecVizError, match="Unknown example 'nope': choose from"):
        api.example("nope")


@pytest.mark.parametrize("settings, says", [
    ({"prompt": ""}, "The prompt is empty"),
    ({"max_new_tokens": 10**6}, "between 1 and"),
    ({"modes": "static:0"}, "between 1 and"),
    ({"temperature": -1.0}, "Temperature"),
    ({"preset": "gpt-17"}, "Unknown preset 'gpt-17'"),
])
def test_compare_checks_its_input_before_any_model_work(settings, says):
    args = {"prompt": "Hello", "preset": "smollm2-135m-int8", "max_new_tokens": 16, **settings}
    with pytest.raises(SpecVizError, match=says):
        next(api.compare(**args))
