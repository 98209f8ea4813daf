"""One prompt through the baseline, the oracle and every policy: the data flow of docs/DESIGN.md.

`run_comparison` streams one comparison: it reports after every draft step and every round of
every run. The app, the API and the study reach it through `run_preset`, the one door to model
work that a ZeroGPU Space lends a GPU to (see gpu.py); they only turn its results into screens
and files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .. import settings
from ..errors import SpecVizError
from ..pair import gpu
from ..pair.models import ModelPair, encode_prompt, get_pair
from .costcurve import live_pass_costs, pass_costs
from .drafts import DEFAULT_DRAFT, DraftSpec, check_draft, parse_draft
from .engine import decode_target_only, speculate
from .modes import ModeSpec, check_modes, make_policy, parse_modes
from .policies import Oracle, Policy
from .trace import Baseline, Comparison, Round, Trace, first_difference

MAX_TEMPERATURE = 2.0
T = TypeVar("T")


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
            raw = settings.read(name)
            try:
                value = kind(float(raw)) if kind is int else kind(raw)
            except (ValueError, OverflowError):
                return default
            return value if value > 0 else default  # nan is not > 0; inf (no budget) only for floats

        return cls(max_new_tokens=int(read("SPECVIZ_MAX_NEW_TOKENS", cls.max_new_tokens, int)),
                   max_prompt_tokens=int(read("SPECVIZ_MAX_PROMPT_TOKENS", cls.max_prompt_tokens, int)),
                   time_budget_s=float(read("SPECVIZ_TIME_BUDGET_S", cls.time_budget_s, float)),
                   queue_size=int(read("SPECVIZ_QUEUE_SIZE", cls.queue_size, int)))

    def allowing(self, expected_s: float | None) -> Limits:
        """These limits with a time budget a request expected to take `expected_s` can finish in on
        a busy machine: 1.5 times that, if more than the configured budget, but never more than
        four times it. The real pair takes about 4 min for 128 tokens on 2 cores, more than the
        default 300 s once a second run competes for the cores."""
        if expected_s is None or not expected_s > 0:
            return self
        budget = min(max(self.time_budget_s, 1.5 * expected_s), 4 * self.time_budget_s)
        return replace(self, time_budget_s=budget)


@dataclass(frozen=True)
class Request:
    """A validated comparison request."""

    prompt: str
    modes: list[ModeSpec]
    max_new_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    chat: bool = True
    draft: DraftSpec = DEFAULT_DRAFT  # what proposes the tokens (drafts.DRAFTS): the pair's draft model unless told

    @property
    def runs(self) -> int:
        """Decoding runs of the comparison: one per policy, and target-only decoding."""
        return len(self.modes) + 1


def make_request(prompt: str, modes: str | list[ModeSpec], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None, chat: bool = True, limits: Limits | None = None,
                 draft: DraftSpec | str | None = None) -> Request:
    """Check user input before any model work; raise SpecVizError with a readable message.
    `draft`: a `DraftSpec` or a draft string ("lookup:3:16"); None: the pair's draft model."""
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
    check_modes(specs)
    drafted_by = parse_draft(draft) if isinstance(draft, str) else check_draft(draft or DEFAULT_DRAFT)
    return Request(prompt, specs, int(max_new_tokens), float(temperature), seed, chat, drafted_by)


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


def label_round(tokenizer: object, context: list[int], r: Round) -> list[int]:
    """Give a round the display text of its tokens; return the context after it."""
    r.draft_texts = token_pieces(tokenizer, context, r.draft_ids)
    accepted_context = context + r.draft_ids[: r.accepted]
    if r.target_id is not None:
        r.target_text = token_pieces(tokenizer, accepted_context, [r.target_id])[0]
    return accepted_context + ([] if r.target_id is None else [r.target_id])


def mark_ideal(rounds: list[Round], ideal: list[int]) -> None:
    """Record the oracle's ideal lookahead at each round's start position."""
    for r in rounds:
        if r.position < len(ideal):
            r.oracle_ideal = ideal[r.position]


def check_lossless(trace: Trace, baseline: Baseline) -> None:
    """Greedy decoding must reproduce target-only decoding token for token."""
    if trace.temperature <= 0:
        trace.first_difference = first_difference(trace.token_ids, baseline.token_ids)
        trace.lossless = trace.first_difference is None


def _relay(steps: Generator[Any, None, T],
           report: Callable[[Any], Update]) -> Generator[Update, None, tuple[T, float]]:
    """Report every step of a step-by-step computation as an Update; return its result and the
    seconds it spent itself (not the caller's time between steps)."""
    busy = 0.0
    while True:
        started = time.perf_counter()
        try:
            step = next(steps)
        except StopIteration as done:
            return done.value, busy + time.perf_counter() - started
        busy += time.perf_counter() - started
        yield report(step)


@dataclass
class Update:
    """What the pipeline reports after every step: the comparison so far, and the policy run
    under way (its rounds so far; it joins `comparison.traces` when it ends)."""

    comparison: Comparison
    running: Trace | None
    message: str

    def fraction_done(self, request: Request) -> float:
        """How far the comparison is, 0 to 1: its finished runs (the policies and target-only),
        and the running one's tokens."""
        finished = len(self.comparison.traces) + (self.comparison.baseline is not None)
        running = len(self.running.token_ids) / request.max_new_tokens if self.running is not None else 0.0
        return min(1.0, (finished + running) / request.runs)


def run_comparison(pair: ModelPair, request: Request, limits: Limits | None = None,
                   progress: Callable[[str], None] | None = None) -> Iterator[Update]:
    """Run every policy, the oracle and target-only decoding; yield an Update after every draft
    step (the running trace's `pending` holds the proposal, with display text) and every round.

    The order gets a first column on screen at once: the policies run first, and the first
    greedy policy's answer (the target's greedy answer, speculative decoding being lossless)
    is the reference the oracle is computed along. Target-only decoding runs last; the lossless
    check and the speedups wait for it. Stops early, marking the comparison partial, when the
    time budget runs out.
    """
    run = ComparisonRun(pair, request, limits or Limits.from_env(), progress or (lambda message: None))
    greedy = request.temperature <= 0
    oracle_specs = [s for s in request.modes if s.policy == "oracle"] if greedy else []
    for spec in [s for s in request.modes if s.policy != "oracle"]:
        yield from run.policy((yield from run.make_policy(spec)))
        if run.comparison.partial:
            break
        last = run.comparison.traces[-1]
        if greedy and run.oracle is None and last.stop_reason != "stopped":
            yield from run.find_oracle(last.token_ids, last.label)
    if oracle_specs and not run.comparison.partial:
        if run.oracle is None:  # no other policy ran: the reference comes from target-only decoding
            yield from run.baseline()
            if run.comparison.baseline is not None:
                yield from run.find_oracle(run.comparison.baseline.token_ids, None)
        if run.oracle is not None:
            yield from run.policy(make_policy(oracle_specs[0], run.oracle))
    if run.comparison.baseline is None and not run.comparison.partial:
        yield from run.baseline()
    run.check_lossless()
    yield Update(run.comparison, None, "Done")


class ComparisonRun:
    """One comparison's state while it runs, and its steps: a policy's run, the oracle's search,
    target-only decoding. `run_comparison` above decides their order."""

    def __init__(self, pair: ModelPair, request: Request, limits: Limits, say: Callable[[str], None]):
        self.pair, self.request, self.say = pair, request, say
        self.draft = request.draft.kind  # what proposes the tokens, and how the oracle treats it
        self.prompt_ids = prompt_ids_for(pair, request, limits)
        self.deadline = time.monotonic() + limits.time_budget_s
        greedy = request.temperature <= 0
        self.comparison = Comparison(
            preset=pair.preset, prompt=request.prompt, max_new_tokens=request.max_new_tokens, baseline=None,
            traces=[], temperature=request.temperature, seed=request.seed if not greedy else None,
            prompt_tokens=len(self.prompt_ids), draft_row_exact=pair.draft_row_exact, draft=request.draft,
            prompt_ids=list(self.prompt_ids) if self.draft.keeps_prompt else None)
        self.make_drafter = self.draft.make(request.draft.params)
        self.oracle: Oracle | None = None

    def out_of_time(self) -> bool:
        self.comparison.partial = self.comparison.partial or time.monotonic() > self.deadline
        return self.comparison.partial

    def learn_prices(self, run: Trace | Baseline) -> None:
        """Every run's timings keep the cost-aware rule's prices up to date, once it has any."""
        if (live := live_pass_costs(self.pair)) is not None:
            live.record(run)

    def make_policy(self, spec: ModeSpec) -> Iterator[Update]:
        """The spec's policy; the cost-aware rule's prices are measured on the pair first (once)."""
        if spec.policy != "costaware":
            return make_policy(spec)
        if live_pass_costs(self.pair) is None:
            message = "Measuring what a pass costs on this machine (for the cost-aware rule)"
            self.say(message)
            yield Update(self.comparison, None, message)
            pass_costs(self.pair)
            for trace in self.comparison.traces:  # the runs before it, timed on this very prompt
                self.learn_prices(trace)
        return make_policy(spec, prices=self.draft.prices(pass_costs(self.pair)))

    def policy(self, policy: Policy) -> Iterator[Update]:
        """Speculative decoding with `policy`, each round given its display text and the ideal."""
        message = f"Running {policy.label}"
        self.say(message)
        pair, request, comparison = self.pair, self.request, self.comparison
        context = list(self.prompt_ids)
        labelled = 0
        for trace in speculate(pair, self.prompt_ids, policy, request.max_new_tokens, request.temperature,
                               request.seed, self.make_drafter):
            for r in trace.rounds[labelled:]:
                context = label_round(pair.tokenizer, context, r)
            if comparison.oracle_ideal is not None:
                mark_ideal(trace.rounds[labelled:], comparison.oracle_ideal)
            labelled = len(trace.rounds)
            if trace.pending is not None:
                trace.pending.draft_texts = token_pieces(pair.tokenizer, context, trace.pending.draft_ids)
            yield Update(comparison, trace, message)
            if trace.pending is None and self.out_of_time():  # a drafted round is verified before stopping
                break
        trace.text = pair.tokenizer.decode(trace.token_ids, skip_special_tokens=True)
        comparison.traces.append(trace)
        self.learn_prices(trace)

    def find_oracle(self, reference: list[int], source: str | None) -> Iterator[Update]:
        """The oracle's ideal lookahead along `reference` (the target's greedy answer)."""
        message = "Finding the oracle's ideal lookahead along the target's answer"
        self.say(message)
        comparison = self.comparison
        yield Update(comparison, None, message)

        def report(position: int) -> Update:
            return Update(comparison, None, f"{message}: {position} of {len(reference)} tokens")

        # along: the draft's guesses along the answer, None for a draft the what-if recomputes from the text
        search = self.draft.oracle(self.pair, self.prompt_ids, reference, self.request.draft.params)
        (self.oracle, ideal, along), comparison.oracle_s = yield from _relay(search, report)
        comparison.oracle_ideal, comparison.draft_along_reference = ideal, along
        comparison.oracle_reference = source
        for t in comparison.traces:
            mark_ideal(t.rounds, ideal)

    def baseline(self) -> Iterator[Update]:
        """Target-only decoding, the reference for the lossless check and the speedups."""
        message = "Running the target alone (target-only baseline)"
        self.say(message)
        request = self.request
        for baseline in decode_target_only(self.pair, self.prompt_ids, request.max_new_tokens,
                                           request.temperature, request.seed):
            yield Update(self.comparison, None,
                         f"{message}: {len(baseline.token_ids)} of {request.max_new_tokens} tokens")
            if self.out_of_time():
                return
        baseline.text = self.pair.tokenizer.decode(baseline.token_ids, skip_special_tokens=True)
        self.comparison.baseline = baseline
        self.learn_prices(baseline)

    def check_lossless(self) -> None:
        if self.comparison.baseline is not None:
            for trace in self.comparison.traces:
                check_lossless(trace, self.comparison.baseline)


def compare(pair: ModelPair, request: Request, limits: Limits | None = None,
            progress: Callable[[str], None] | None = None) -> Comparison:
    """`run_comparison` run to the end."""
    return _finished(run_comparison(pair, request, limits, progress))


def _gpu_seconds(preset: str, request: Request, limits: Limits | None = None) -> int:
    return gpu.comparison_gpu_s(request.max_new_tokens, request.runs)


@gpu.gpu_work(duration=_gpu_seconds)
def run_preset(preset: str, request: Request, limits: Limits | None = None) -> Iterator[Update]:
    """`run_comparison` on this process's pair for `preset` (`models.get_pair`), as GPU work: on a
    ZeroGPU Space inside `spaces.GPU`, which runs it in another process. Hence a preset's name and
    not a pair, and a prompt checked first with `prompt_ids_for`: an error raised over there
    reaches the caller without its type."""
    yield from run_comparison(get_pair(preset), request, limits)


def compare_preset(preset: str, request: Request, limits: Limits | None = None) -> Comparison:
    """`run_preset` run to the end."""
    return _finished(run_preset(preset, request, limits))


def _finished(updates: Iterator[Update]) -> Comparison:
    """The comparison after the last of its updates."""
    update = None
    for update in updates:
        pass
    assert update is not None
    return update.comparison
