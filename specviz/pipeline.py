"""One prompt through the baseline, the oracle and every policy: the data flow of DESIGN.md.

The app and the CLI call `run_comparison` (streaming: it yields the comparison again after
each policy finishes) and only turn its results into screens and files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .engine import generate, target_only
from .errors import SpecVizError
from .models import ModelPair, encode_prompt
from .oracle import make_oracle
from .policies import ModeSpec, Oracle, make_policy, parse_modes
from .trace import Baseline, Comparison, Trace, first_difference

MAX_TEMPERATURE = 2.0


@dataclass(frozen=True)
class Limits:
    """Caps that protect a shared server; each can be set by an environment variable."""

    max_new_tokens: int = 512
    max_prompt_tokens: int = 2048
    time_budget_s: float = 300.0  # per request, all policies together
    queue_size: int = 16  # requests waiting in the app's queue

    @classmethod
    def from_env(cls) -> Limits:
        def read(name: str, default: float, kind: type) -> float:
            # A value that is not a positive number (typo, 0, -1, nan, inf for counts) means the default:
            # a misconfigured server should start with sane caps rather than none or a crash.
            raw = os.environ.get(name, "").strip()
            try:
                value = kind(float(raw)) if kind is int else kind(raw)
            except (ValueError, OverflowError):
                return default
            return value if value > 0 else default  # nan is not > 0; inf (no budget) only for floats

        return cls(max_new_tokens=int(read("SPECVIZ_MAX_NEW_TOKENS", cls.max_new_tokens, int)),
                   max_prompt_tokens=int(read("SPECVIZ_MAX_PROMPT_TOKENS", cls.max_prompt_tokens, int)),
                   time_budget_s=float(read("SPECVIZ_TIME_BUDGET_S", cls.time_budget_s, float)),
                   queue_size=int(read("SPECVIZ_QUEUE_SIZE", cls.queue_size, int)))


@dataclass(frozen=True)
class Request:
    """A validated comparison request."""

    prompt: str
    modes: list[ModeSpec]
    max_new_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    chat: bool = True


def make_request(prompt: str, modes: str | list[ModeSpec], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None, chat: bool = True, limits: Limits | None = None) -> Request:
    """Check user input before any model work; raise SpecVizError with a readable message."""
    limits = limits or Limits.from_env()
    if isinstance(prompt, str) and "\x00" in prompt:
        prompt = prompt.replace("\x00", "")  # NUL bytes mean nothing to a tokenizer; drop them quietly
    if not isinstance(prompt, str) or not prompt.strip():
        raise SpecVizError("The prompt is empty: type a question or a task.")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, float)) \
            or int(max_new_tokens) != max_new_tokens:
        raise SpecVizError(f"Max new tokens must be a whole number, got {max_new_tokens!r}.")
    if not 1 <= max_new_tokens <= limits.max_new_tokens:
        raise SpecVizError(f"Max new tokens must be between 1 and {limits.max_new_tokens}, got {int(max_new_tokens)}.")
    if not isinstance(temperature, (int, float)) or not 0.0 <= temperature <= MAX_TEMPERATURE:
        raise SpecVizError(f"Temperature must be between 0 (greedy) and {MAX_TEMPERATURE:g}, got {temperature!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise SpecVizError(f"The seed must be a whole number of 0 or more, got {seed!r}.")
    specs = parse_modes(modes) if isinstance(modes, str) else list(modes)
    return Request(prompt, specs, int(max_new_tokens), float(temperature), seed, chat)


def prompt_ids_for(pair: ModelPair, request: Request, limits: Limits | None = None) -> list[int]:
    limits = limits or Limits.from_env()
    ids = encode_prompt(pair, request.prompt, chat=request.chat)
    cap = min(limits.max_prompt_tokens, pair.max_context - request.max_new_tokens)
    if len(ids) > cap:
        raise SpecVizError(
            f"The prompt is {len(ids)} tokens long; this server accepts at most {cap} prompt tokens "
            f"with {request.max_new_tokens} new tokens (context {pair.max_context}, prompt limit "
            f"{limits.max_prompt_tokens}). Shorten the prompt."
        )
    return ids


def token_pieces(tokenizer: object, context: list[int], tokens: list[int]) -> list[str]:
    """Display text of each token after `context`, decoded with a few tokens of context so that
    leading spaces and multi-byte characters come out right."""
    pieces = []
    window = list(context[-8:])
    for token in tokens:
        before = tokenizer.decode(window, skip_special_tokens=False)
        after = tokenizer.decode(window + [token], skip_special_tokens=False)
        pieces.append(after[len(before):] if after.startswith(before) else tokenizer.decode([token]))
        window = (window + [token])[-8:]
    return pieces


def annotate(trace: Trace, pair: ModelPair, prompt_ids: list[int], baseline: Baseline,
             ideal: list[int] | None) -> Trace:
    """Add what the engine does not know: texts, the lossless check, the oracle's ideal per round."""
    tokenizer = pair.tokenizer
    trace.text = tokenizer.decode(trace.token_ids, skip_special_tokens=True)
    context = list(prompt_ids)
    for r in trace.rounds:
        r.draft_texts = token_pieces(tokenizer, context, r.draft_ids)
        accepted_context = context + r.draft_ids[: r.accepted]
        if r.target_id is not None:
            r.target_text = token_pieces(tokenizer, accepted_context, [r.target_id])[0]
        if ideal is not None and r.position < len(ideal):
            r.oracle_ideal = ideal[r.position]
        context = accepted_context + ([] if r.target_id is None else [r.target_id])
    if trace.temperature <= 0:
        trace.first_difference = first_difference(trace.token_ids, baseline.token_ids)
        trace.lossless = trace.first_difference is None
    return trace


def run_comparison(pair: ModelPair, request: Request, limits: Limits | None = None,
                   progress: Callable[[str], None] | None = None) -> Iterator[Comparison]:
    """Run baseline, oracle and policies; yield the growing comparison after each step.

    Stops early (marking the comparison partial) when the per-request time budget runs out.
    """
    limits = limits or Limits.from_env()
    say = progress or (lambda message: None)
    prompt_ids = prompt_ids_for(pair, request, limits)
    deadline = time.monotonic() + limits.time_budget_s

    def out_of_time() -> bool:
        return time.monotonic() > deadline

    greedy = request.temperature <= 0
    say("Running the target alone (baseline)")
    baseline = target_only(pair, prompt_ids, request.max_new_tokens, request.temperature, request.seed,
                           should_stop=out_of_time)
    baseline.text = pair.tokenizer.decode(baseline.token_ids, skip_special_tokens=True)
    comparison = Comparison(preset=pair.preset, prompt=request.prompt, max_new_tokens=request.max_new_tokens,
                            baseline=baseline, traces=[], temperature=request.temperature,
                            seed=request.seed if not greedy else None, prompt_tokens=len(prompt_ids),
                            partial=baseline.stop_reason == "stopped")
    oracle: Oracle | None = None
    ideal: list[int] | None = None
    if greedy and not comparison.partial:
        say("Finding the oracle's ideal lookahead along the target's answer")
        oracle, ideal, along = make_oracle(pair, prompt_ids, baseline.token_ids, request.max_new_tokens)
        comparison.oracle_ideal = ideal
        comparison.draft_along_reference = along
    yield comparison

    for spec in request.modes:
        if comparison.partial:
            break
        if spec.policy == "oracle" and oracle is None:
            continue  # the oracle is defined by the greedy reference; sampled runs have none
        policy = make_policy(spec, oracle)
        say(f"Running {policy.label}")
        trace = generate(pair, prompt_ids, policy, request.max_new_tokens, request.temperature, request.seed,
                         should_stop=out_of_time)
        comparison.traces.append(annotate(trace, pair, prompt_ids, baseline, ideal))
        comparison.partial = trace.stop_reason == "stopped"
        yield comparison


def compare(pair: ModelPair, request: Request, limits: Limits | None = None,
            progress: Callable[[str], None] | None = None) -> Comparison:
    """`run_comparison` run to the end."""
    result = None
    for result in run_comparison(pair, request, limits, progress):
        pass
    assert result is not None
    return result
