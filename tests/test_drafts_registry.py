"""The draft registry (decoding/drafts.py): draft strings parsed and formatted as mode strings are,
a clear error for an unknown draft, every entry complete, a request and a comparison naming their
draft (old comparison files included), the page's boxes, the CLI's options and the API's
parameters read from it, and a draft added to it running end to end (the last on the tiny pair)."""

import argparse
import dataclasses
import inspect
import json
from pathlib import Path

import pytest

from specviz.decoding.drafts import (
    DEFAULT_DRAFT,
    DRAFTS,
    DraftSetting,
    DraftSpec,
    TextDraft,
    add_arguments,
    draft_choices,
    format_draft,
    from_arguments,
    make_draft,
    pair_setup,
    parse_draft,
)
from specviz.decoding.lookup import Lookup, LookupSettings
from specviz.decoding.pipeline import Request, make_request
from specviz.decoding.policies import PassCosts
from specviz.decoding.trace import Baseline, Comparison, Round, Trace
from specviz.errors import SpecVizError

ROOT = Path(__file__).resolve().parents[1]


# ---- draft strings ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DRAFTS))
def test_a_draft_string_round_trips_at_defaults_and_with_settings(name):
    spec = DraftSpec.of(name)
    assert parse_draft(format_draft(spec)) == spec == parse_draft(name)
    changed = DraftSpec.of(name, **{s.key: s.default + 1 if s.high is None or s.default < s.high else s.default - 1
                                    for s in DRAFTS[name].settings})
    assert parse_draft(format_draft(changed)) == changed


def test_draft_strings_read_as_mode_strings_do():
    assert parse_draft("lookup:3:16") == DraftSpec("lookup", {"max_ngram": 3, "max_tokens": 16})
    assert parse_draft("lookup:3") == DraftSpec("lookup", {"max_ngram": 3, "max_tokens": 10})  # the rest at defaults
    assert parse_draft(" Lookup ") == DraftSpec.of("lookup")
    assert format_draft(DraftSpec.of("lookup")) == "lookup:2:10" and format_draft(DEFAULT_DRAFT) == "model"
    assert parse_draft("") == parse_draft(None) == parse_draft("model") == DEFAULT_DRAFT == DraftSpec("model")


@pytest.mark.parametrize("text", ["telepathy", "telepathy:3", "draft-model"])
def test_an_unknown_draft_is_one_line_naming_every_draft(text):
    with pytest.raises(SpecVizError) as error:
        parse_draft(text)
    message = str(error.value)
    assert "\n" not in message and message.startswith("The draft must be ")
    assert all(f'"{name}"' in message for name in DRAFTS) and repr(text.split(":")[0]) in message


@pytest.mark.parametrize("text, says", [
    ("lookup:0", "n-gram size must be a whole number from 1 to 8, got 0"),
    ("lookup:2:65", "tokens per lookup must be a whole number from 1 to 64, got 65"),
    ("lookup:two", "Cannot read the settings in the draft 'lookup:two'"),
    ("lookup:1:2:3", "takes at most 2 settings"),
    ("model:3", "takes at most 0 settings"),
])
def test_bad_draft_settings_are_one_line_errors(text, says):
    with pytest.raises(SpecVizError, match=says) as error:
        parse_draft(text)
    assert "\n" not in str(error.value)


def test_a_setting_the_draft_does_not_have_is_refused():
    with pytest.raises(SpecVizError, match="The draft 'lookup' has no setting 'k'"):
        make_draft("lookup", k=3)
    with pytest.raises(SpecVizError, match="The draft must be"):
        make_draft("telepathy")


# ---- the registry's entries ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DRAFTS))
def test_every_draft_has_a_title_a_blurb_and_complete_settings(name):
    kind = DRAFTS[name]
    assert kind.name == name and kind.title and kind.blurb
    assert kind.blurb in draft_choices() and f'"{name}"' in draft_choices()
    shorts = [s.short for s in kind.settings]
    assert len(set(shorts)) == len(shorts) and len({s.tag for s in kind.settings}) == len(shorts)
    for s in kind.settings:
        assert isinstance(s, DraftSetting) and s.key and s.short and s.tag and s.label and s.help and s.info
        assert s.low <= s.default and (s.high is None or s.default <= s.high)
        assert s.whole == isinstance(s.default, int)
    kind.check(kind.defaults())  # its defaults pass its own check
    assert kind.label(kind.defaults()).startswith(name)
    assert kind.from_text == isinstance(kind, TextDraft)
    if kind.from_text:  # no model: no draft pass, and a proposal the what-if can recompute
        assert not kind.counts_passes and kind.step_ms is not None and kind.step_ms > 0
        assert isinstance(kind.proposer(kind.defaults())([1, 2, 1], frozenset()), Lookup)


def test_the_registry_holds_the_model_draft_first_and_the_lookup_draft():
    assert next(iter(DRAFTS)) == DEFAULT_DRAFT.name == "model"
    assert DRAFTS["model"].title == "draft model" and DRAFTS["lookup"].title == "prompt lookup"  # the page's menu
    assert DRAFTS["model"].counts_passes and not DRAFTS["model"].from_text and DRAFTS["model"].settings == ()
    lookup = DRAFTS["lookup"]
    assert lookup.defaults() == LookupSettings().to_dict()  # transformers' settings
    assert lookup.label(lookup.defaults()) == "lookup (n-gram 2, 10 tokens)" == DraftSpec.of("lookup").label
    assert lookup.described({"max_ngram": 3, "max_tokens": 16}) == "n-gram 3, 16 tokens"


def test_what_the_cost_aware_rule_is_told_a_step_costs():
    measured = PassCosts(20.0, (30.0, 31.0), catch_up_ms=(20.0, 21.0))
    assert DRAFTS["model"].prices(measured) == measured  # the pair's measured draft call
    assert DRAFTS["lookup"].prices(measured) == PassCosts(0.05, (30.0, 31.0))  # a lookup's step, no catch-up


def test_no_draft_name_is_a_field_of_a_comparison_file():
    """A comparison's JSON keeps a draft's settings under the draft's name: no draft may be
    named like one of the file's own fields."""
    baseline = Baseline(token_ids=[1], wall_s=0.1, stop_reason="eos")
    fields = set(Comparison("p", "x", 1, baseline, [], prompt_ids=[1]).to_dict()) | {"draft"}
    assert not fields & (set(DRAFTS) - {DEFAULT_DRAFT.name})


# ---- a request and a comparison name their draft ---------------------------------------------


def test_a_request_names_its_draft_and_no_field_for_one_kind():
    names = {f.name for f in dataclasses.fields(Request)}
    assert "draft" in names and "lookup" not in names
    assert make_request("Hi", "static:5", 8).draft == DEFAULT_DRAFT
    assert make_request("Hi", "static:5", 8, draft="lookup:3").draft == DraftSpec("lookup", {"max_ngram": 3,
                                                                                             "max_tokens": 10})
    assert make_request("Hi", "static:5", 8, draft=DraftSpec.of("lookup")).draft == DraftSpec.of("lookup")
    with pytest.raises(SpecVizError, match="n-gram size must be"):  # checked before any model work
        make_request("Hi", "static:5", 8, draft=DraftSpec("lookup", {"max_ngram": 99, "max_tokens": 10}))
    with pytest.raises(SpecVizError, match="The draft must be"):
        make_request("Hi", "static:5", 8, draft=DraftSpec("telepathy"))


def _comparison(draft: DraftSpec) -> Comparison:
    rounds = [Round(index=0, position=0, budget=3, draft_ids=[1, 2], draft_probs=[1.0, 0.5], accepted=2, target_id=3,
                    draft_passes=0, draft_source=0)]
    trace = Trace("static", "static k=3", {}, [1, 2, 3], rounds, 0.1, "max_new_tokens")
    baseline = Baseline(token_ids=[1, 2, 3], wall_s=0.2, stop_reason="max_new_tokens")
    return Comparison("p", "x", 3, baseline, [trace], draft=draft, prompt_ids=[1, 2])


def test_a_comparison_file_keeps_its_draft_as_before():
    model = _comparison(DEFAULT_DRAFT).to_dict()
    assert not set(model) & set(DRAFTS)  # a model draft's file: no field for it, as before drafts had names
    assert Comparison.from_dict(model).draft == DEFAULT_DRAFT
    lookup = _comparison(DraftSpec("lookup", {"max_ngram": 3, "max_tokens": 16})).to_dict()
    assert lookup["lookup"] == {"max_ngram": 3, "max_tokens": 16}  # the field lookup comparisons always had
    assert Comparison.from_dict(json.loads(json.dumps(lookup))).draft == DraftSpec("lookup", {"max_ngram": 3,
                                                                                               "max_tokens": 16})


def test_comparison_files_written_before_the_registry_load_with_their_draft():
    from specviz.explain.sweep import can_replay

    editing = Comparison.from_json((ROOT / "assets" / "examples" / "editing-lookup.json").read_text(encoding="utf-8"))
    assert editing.draft == DraftSpec.of("lookup") and editing.prompt_ids and can_replay(editing)
    coding = Comparison.from_json((ROOT / "assets" / "examples" / "coding.json").read_text(encoding="utf-8"))
    assert coding.draft == DEFAULT_DRAFT and coding.draft_along_reference is not None and can_replay(coding)
    old = json.loads((ROOT / "assets" / "examples" / "editing-lookup.json").read_text(encoding="utf-8"))
    assert Comparison.from_dict(old).to_dict() == old  # written back as it was


def test_a_pair_studied_with_a_draft_is_named_by_it():
    from specviz.study.report import model_preset
    from specviz.study.runner import study_name

    assert study_name("pair-a", DEFAULT_DRAFT) == "pair-a"
    assert study_name("pair-a", DraftSpec.of("lookup")) == "pair-a+lookup"
    assert study_name("pair-a", parse_draft("lookup:3:16")) == "pair-a+lookup-n3-k16"
    assert model_preset("pair-a+lookup-n3-k16") == model_preset("pair-a+lookup") == "pair-a"
    assert pair_setup("target fp32; draft int8", DEFAULT_DRAFT) == "target fp32; draft int8"
    with_lookup = pair_setup("target fp32; draft int8", DraftSpec.of("lookup"))
    assert with_lookup == "target fp32; draft lookup (n-gram 2, 10 tokens)"


# ---- the page, the command line, the API and MCP read the registry ----------------------------


def test_the_page_builds_a_box_for_each_draft_setting_with_the_ids_the_browser_tests_use():
    from specviz.ui.inputs import DRAFT_WIDGETS, widget_draft

    ids = [w.elem_id for w in DRAFT_WIDGETS]
    assert ids[ids.index("lookup-ngram"):][:2] == ["lookup-ngram", "lookup-tokens"] and len(set(ids)) == len(ids)
    assert [w.keyword for w in DRAFT_WIDGETS] == [i.replace("-", "_") for i in ids]  # as the API's parameters
    assert {(w.draft, w.setting.key) for w in DRAFT_WIDGETS} == {
        (name, s.key) for name, kind in DRAFTS.items() for s in kind.settings if s.label}
    assert widget_draft("lookup", 3.0, 16.0) == DraftSpec("lookup", {"max_ngram": 3, "max_tokens": 16})
    assert widget_draft("model", None, None) == DEFAULT_DRAFT  # another draft's boxes are not read


def test_the_api_takes_the_drafts_settings_by_name_and_a_draft_string_too():
    from specviz.ui import endpoints
    from specviz.ui.inputs import DRAFT_WIDGETS, draft_value

    parameters = inspect.signature(endpoints.compare).parameters
    assert {"draft", "lookup_ngram", "lookup_tokens"} <= set(parameters)  # named as the page's boxes are
    assert all(w.keyword in parameters for w in DRAFT_WIDGETS if w.draft == "lookup")
    assert all(f'"{name}"' in endpoints.compare.__doc__ for name in DRAFTS)
    for name in DRAFTS:  # any draft's settings through its draft string
        assert draft_value(format_draft(DraftSpec.of(name))) == DraftSpec.of(name)
    assert draft_choices() in endpoints.compare.__doc__
    assert draft_value("lookup:4", lookup_ngram=2, lookup_tokens=12) == DraftSpec("lookup", {"max_ngram": 4,
                                                                                             "max_tokens": 12})


def test_the_command_line_offers_every_draft_and_its_settings():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_arguments(parser.parse_args([])) == DEFAULT_DRAFT
    assert from_arguments(parser.parse_args(["--draft", "lookup", "--lookup-ngram", "3", "--lookup-tokens", "16"])) \
        == DraftSpec("lookup", {"max_ngram": 3, "max_tokens": 16})
    assert from_arguments(parser.parse_args(["--draft", "lookup"])) == DraftSpec.of("lookup")
    with pytest.raises(SystemExit):
        parser.parse_args(["--draft", "telepathy"])
    options = {option for action in parser._actions for option in action.option_strings}
    assert {f"--{name}-{s.short}" for name, kind in DRAFTS.items() for s in kind.settings} <= options


# ---- a draft added to the registry runs everywhere (on the tiny pair) --------------------------


def repeat_last(text: list[int], settings: LookupSettings, eos_ids: frozenset[int]) -> Lookup:
    """A toy draft read from the text: the last token, max_tokens times (none after EOS)."""
    if not text or text[-1] in eos_ids:
        return Lookup()
    return Lookup([text[-1]] * settings.max_tokens, [1.0] * settings.max_tokens, [0.0] * settings.max_tokens)


REPEAT = TextDraft("repeat", "repeat the last token", "repeats the last token; no draft model runs",
                   (DraftSetting("max_tokens", 3, 1, 64, whole=True, label="repeat tokens", short="tokens", tag="k",
                                 help="how many times", info="how many times"),),
                   "{max_tokens} times", step_ms=0.01, settings_of=LookupSettings, propose=repeat_last)


def test_a_draft_added_to_the_registry_runs_is_replayed_and_filed(tiny_pair, monkeypatch):
    """One registry entry, and its kind makes the engine's drafter and finds the oracle's ideal
    (the pipeline asks no more of it), the what-if replays it exactly, and its comparison files
    and loads under its name."""
    from specviz.decoding.engine import generate, target_only
    from specviz.decoding.oracle import finish
    from specviz.decoding.policies import Dynamic, Heuristic, Static
    from specviz.explain.sweep import can_replay, replayed_passes

    monkeypatch.setitem(DRAFTS, "repeat", REPEAT)
    spec = parse_draft("repeat:4")
    assert spec == DraftSpec("repeat", {"max_tokens": 4}) and spec.label == "repeat (4 times)"
    prompt = [3, 3, 3, 3, 5, 5]
    baseline = target_only(tiny_pair, prompt, 30)
    oracle, ideal, along = finish(spec.kind.oracle(tiny_pair, prompt, baseline.token_ids, spec.params))
    assert along is None and len(ideal) == len(baseline.token_ids)
    policies = [lambda: Static(2), lambda: Static(4), lambda: Heuristic(2), lambda: Dynamic(0.4, max_tokens=20)]
    runs = [generate(tiny_pair, prompt, make(), 30, make_drafter=spec.kind.make(spec.params)) for make in policies]
    best = generate(tiny_pair, prompt, oracle, 30, make_drafter=spec.kind.make(spec.params))
    for run in [best, *runs]:
        assert run.token_ids == baseline.token_ids and run.draft_passes == 0
        assert all(r.accepted == min(r.lookahead, ideal[r.position]) for r in run.rounds)
        assert best.target_passes <= run.target_passes
    comparison = Comparison("tiny", "tiny", 30, baseline, runs, prompt_tokens=len(prompt), draft=spec,
                            prompt_ids=list(prompt))
    again = Comparison.from_json(comparison.to_json())
    assert again.to_dict()["repeat"] == {"max_tokens": 4} and again.draft == spec and can_replay(again)
    for make, run in zip(policies, runs):
        passes = replayed_passes(again, make(), tiny_pair.eos_token_ids)
        assert (passes.target, passes.draft) == (run.target_passes, 0)
