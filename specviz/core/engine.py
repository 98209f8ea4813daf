"""The speculative decoding loop, and target-only decoding as its baseline.

One round, for every policy:

    1. draft   - the drafter proposes tokens until the policy's budget is spent or the policy
                 says stop (or it proposes EOS): a draft model one forward pass at a time
                 (`Drafter`), or a lookup that copies from the text so far (`LookupDrafter`);
    2. verify  - the target scores the whole proposal in one forward pass;
    3. accept  - greedy: the longest prefix the target agrees with, then the target's own
                 token; sampling: rejection sampling, which keeps the target's distribution;
    4. update  - both KV caches drop what was rejected;
    5. record  - a `Round` with tokens, probabilities, verdict, passes and timings.

The target's cache follows transformers' assisted generation: it holds every committed token
but the last, and each verify pass reads that token with the proposal. The draft is fed
differently (`Drafter`): so that its guess at an answer position is a function of the text
alone, whatever the rounds before were. That is what makes the oracle the true ideal and the
what-if replay exact; it costs one extra draft call after every round whose drafts were all
accepted, and a draft that is not row-exact reads its backlog one token per call.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from . import lookup
from .lookup import LookupSettings
from .policies import CATCH_UP_ROWS, DraftStep, Policy
from .trace import Baseline, Pending, Round, Trace

if TYPE_CHECKING:
    from .models import ModelPair


class CachedModel:
    """A causal LM with its KV cache; `length` is how many tokens the cache holds."""

    def __init__(self, model: torch.nn.Module, vocab_size: int, device: torch.device):
        from transformers import DynamicCache

        self.model = model
        self.vocab_size = vocab_size
        self.device = device
        self.cache = DynamicCache(config=model.config)
        self.length = 0

    def forward(self, token_ids: list[int], keep: int = 1) -> torch.Tensor | None:
        """Feed tokens after the cached ones; return fp32 logits for the last `keep` of them.
        With keep=0 only the cache is filled: the output layer is skipped and None returned."""
        inputs = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        self.length += len(token_ids)
        if keep == 0:
            self.model.get_decoder()(input_ids=inputs, cache=self.cache, use_cache=True)
            return None
        output = self.model(input_ids=inputs, cache=self.cache, use_cache=True, logits_to_keep=keep)
        return output.logits[0, -keep:, : self.vocab_size].float()

    def crop(self, length: int) -> None:
        """Forget every cached token after the first `length`."""
        if self.length > length:
            self.cache.crop(-(self.length - length))  # transformers 5: a negative count removes tokens
            self.length = length


class Drafter:
    """The draft model with its KV cache, fed so that its guess at a position is a function of
    the text before it alone: not of how earlier rounds ran.

    Why: a forward call's result depends, at the level of float rounding, on how many tokens it
    reads, and a quantized draft turns such differences into other tokens (a dynamic int8 draft
    picks its activation scales per call). Guesses that depend on where a policy's rounds ended
    would make the oracle's ideal, computed along the answer once, differ from what the policies
    meet, and the what-if replay inexact. So:

    - the prompt but its last token is read in one call, the first time the draft runs;
    - a round starts by reading the committed tokens the cache lacks (the last of them gives the
      first draft token's logits): after a round whose drafts were all accepted that is one more
      than the drafted tokens (its last draft token was never read), after a round that drafted
      nothing two, after a stretch of plain rounds every token of it;
    - a draft whose rows are bitwise the same in a call of up to CATCH_UP_ROWS rows as alone
      (`row_exact`, checked at load: cpu.rows_exact) reads them in one such call, which gives
      exactly the logits one call per token would; any other draft reads them one per call.
      Calls before the last skip the output layer: only the cache needs them;
    - each draft token is then read in a call of its own.

    Every call is a draft pass (`passes`). transformers reads what its cache lacks in one call
    whatever the draft's rows do (guesses that may depend on the round structure):
    `TransformersDrafter`.
    """

    def __init__(self, model: torch.nn.Module, vocab_size: int, device: torch.device, prompt_ids: list[int],
                 row_exact: bool = False):
        self.cached = CachedModel(model, vocab_size, device)
        self.prompt_ids = list(prompt_ids)
        self.row_exact = row_exact
        self.tokens: list[int] = []  # what the cache holds, in order
        self.passes = 0
        self.prefill_s = 0.0  # the prompt's prefill call: a cost per prompt, not per drafted token

    @classmethod
    def for_pair(cls, pair: ModelPair, prompt_ids: list[int]) -> Drafter:
        return cls(pair.draft, pair.vocab_size, pair.device, prompt_ids, row_exact=pair.draft_row_exact)

    def propose(self, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
                eos_ids: frozenset[int]) -> Proposal:
        """Up to `budget` tokens, one draft forward pass each (plus the catch-up calls)."""
        proposal = Proposal()
        if budget <= 0:
            return proposal
        logits = self.start(sequence)
        for index in range(budget):
            distribution = sampler.distribution(logits)
            token = sampler.pick(distribution)
            step = DraftStep(index, token, *describe(distribution, token))
            proposal.add(step, distribution)
            if token in eos_ids or not policy.keep_drafting(step) or index + 1 == budget:
                break
            logits = self.next(token)
        return proposal

    def read(self, token_ids: list[int], logits: bool = False) -> torch.Tensor | None:
        """One forward call over `token_ids`; the logits after the last of them if asked for."""
        self.passes += 1
        self.tokens += token_ids
        result = self.cached.forward(token_ids, keep=1 if logits else 0)
        return None if result is None else result[-1]

    def keep_prefix(self, sequence: list[int]) -> None:
        """Drop every cached token after the longest prefix shared with `sequence`."""
        shared = 0
        for cached, token in zip(self.tokens, sequence):
            if cached != token:
                break
            shared += 1
        self.cached.crop(shared)
        del self.tokens[shared:]

    def start(self, sequence: list[int]) -> torch.Tensor:
        """The logits for the token after `sequence` (the prompt and the answer so far)."""
        self.keep_prefix(sequence[:-1])
        if not self.tokens and len(self.prompt_ids) > 1:
            started = time.perf_counter()
            self.read(self.prompt_ids[:-1])
            self.prefill_s += time.perf_counter() - started
        missing = sequence[len(self.tokens):]
        per_call = CATCH_UP_ROWS if self.row_exact else 1
        while len(missing) > per_call:
            self.read(missing[:per_call])
            missing = missing[per_call:]
        return self.read(missing, logits=True)

    def next(self, token: int) -> torch.Tensor:
        """The logits after the draft's own `token`, read on top of what the cache holds."""
        return self.read([token], logits=True)


class TransformersDrafter(Drafter):
    """Feeds the draft as the installed transformers' assisted generation does: the whole prompt
    in the first round, then at each round's start one call over the last committed tokens.
    Up to transformers 5.24 that call re-reads the last two of them; from 5.25 on it reads only
    what the draft's cache lacks (the last one, or the last two after a round whose drafts were
    all accepted). The passes are the same; the tokens a call reads are not, and a quantized
    draft turns that into other guesses. Its passes and tokens match transformers'; its guesses
    depend on the round structure (see `Drafter`)."""

    def start(self, sequence: list[int]) -> torch.Tensor:
        reread = 2 if _transformers_rereads_two() else 1
        self.keep_prefix(sequence[: max(0, len(sequence) - reread)])
        return self.read(sequence[len(self.tokens):], logits=True)


class LookupDrafter:
    """Proposes by prompt lookup (lookup.py): copies what followed the last n-gram's first earlier
    occurrence. No model, no forward pass (`passes` stays 0); its time is measured all the same.
    For speculative sampling its distribution is all on the copied token, which rejection
    sampling accepts with the target's probability for it: the target's distribution is kept."""

    def __init__(self, settings: LookupSettings, vocab_size: int, device: torch.device):
        self.settings = settings
        self.vocab_size = vocab_size
        self.device = device
        self.passes = 0
        self.prefill_s = 0.0

    @classmethod
    def using(cls, settings: LookupSettings) -> Callable[[ModelPair, list[int]], LookupDrafter]:
        """A factory for `speculate`'s `drafter`."""
        return lambda pair, prompt_ids: cls(settings, pair.vocab_size, pair.device)

    def propose(self, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
                eos_ids: frozenset[int]) -> Proposal:
        proposal = Proposal()
        if budget <= 0:
            return proposal
        found = lookup.propose(sequence, self.settings, eos_ids)
        proposal.source = found.source
        for step in lookup.drafted(found, budget, policy):
            proposal.add(step, None if sampler.greedy else self._certain(step.token_id))
        return proposal

    def _certain(self, token: int) -> torch.Tensor:
        distribution = torch.zeros(self.vocab_size, device=self.device)
        distribution[token] = 1.0
        return distribution


# What `speculate` calls to make a run's drafter, given the pair and the prompt: the pair's draft
# model (`Drafter.for_pair`, or `TransformersDrafter.for_pair` to reproduce transformers' passes
# exactly), or a lookup in the text (`LookupDrafter.using(settings)`).
MakeDrafter = Callable[["ModelPair", list[int]], "Drafter | LookupDrafter"]


@functools.cache
def _transformers_rereads_two() -> bool:
    """transformers 5.25 changed how assisted generation rolls back its assistant's cache: from
    "keep all but the last two committed tokens" to "drop what was drafted and rejected"."""
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__).release < (5, 25)


class Sampler:
    """Greedy (temperature 0) or seeded sampling, used the same way by draft, target and baseline."""

    def __init__(self, temperature: float = 0.0, seed: int | None = None, device: torch.device | None = None):
        self.temperature = temperature
        self.generator = None
        if temperature > 0:
            self.generator = torch.Generator(device=device or "cpu")
            self.generator.manual_seed(0 if seed is None else seed)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits if self.greedy else logits / self.temperature, dim=-1)

    def pick(self, distribution: torch.Tensor) -> int:
        if self.greedy:
            return int(distribution.argmax())
        return int(torch.multinomial(distribution, 1, generator=self.generator))

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator, device=self.generator.device))


# ---- the five steps of a round -----------------------------------------------------------


@dataclass
class Proposal:
    """The draft's tokens for one round, with its probability for each, the entropy of each
    next-token distribution, and the distributions themselves (speculative sampling needs them)."""

    ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    distributions: list[torch.Tensor] = field(default_factory=list)
    source: int | None = None  # a lookup's: where in the text its tokens were copied from
    # What making it cost the drafter (set by `draft`): its forward calls, their seconds, and the
    # seconds of those calls that caught up on tokens the draft had not seen.
    passes: int = 0
    seconds: float = 0.0
    prefill_s: float = 0.0

    def add(self, step: DraftStep, distribution: torch.Tensor | None) -> None:
        self.ids.append(step.token_id)
        self.probs.append(step.prob)
        self.entropies.append(step.entropy)
        if distribution is not None:
            self.distributions.append(distribution)


def describe(distribution: torch.Tensor, token: int) -> tuple[float, float]:
    """The probability of `token`, and the entropy (nats) of the distribution it was picked from."""
    return float(distribution[token]), float(torch.special.entr(distribution).sum())


def draft(drafter: Drafter | LookupDrafter, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
          eos_ids: frozenset[int]) -> Proposal:
    """Propose up to `budget` tokens for the target to check, with what proposing them cost."""
    started, passes_before, prefill_before = time.perf_counter(), drafter.passes, drafter.prefill_s
    proposal = drafter.propose(sequence, budget, policy, sampler, eos_ids)
    proposal.seconds = time.perf_counter() - started
    proposal.passes, proposal.prefill_s = drafter.passes - passes_before, drafter.prefill_s - prefill_before
    return proposal


def verify(verifier: CachedModel, sequence: list[int], proposal: list[int]) -> torch.Tensor:
    """The target's logits after each committed-or-proposed token: len(proposal) + 1 rows."""
    feed = sequence[verifier.length:] + proposal
    return verifier.forward(feed, keep=len(proposal) + 1)


def accept(proposal: Proposal, target_logits: torch.Tensor, sampler: Sampler) -> tuple[int, int]:
    """How many proposed tokens the target keeps, and the token it adds itself."""
    if sampler.greedy:
        return accept_greedy(proposal.ids, target_logits)
    return accept_sampling(proposal.ids, proposal.distributions, target_logits, sampler)


def accept_greedy(proposal: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Longest prefix the target agrees with, and the target's own next token."""
    predicted = target_logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(proposal) and proposal[accepted] == predicted[accepted]:
        accepted += 1
    return accepted, predicted[accepted]


def accept_sampling(proposal: list[int], draft_distributions: list[torch.Tensor], target_logits: torch.Tensor,
                    sampler: Sampler) -> tuple[int, int]:
    """Speculative sampling: keep token x with probability min(1, p(x)/q(x)); on rejection draw from
    the normalized max(0, p - q); if all are kept, draw a bonus token from p."""
    target_distributions = sampler.distribution(target_logits)
    for i, token in enumerate(proposal):
        p, q = target_distributions[i], draft_distributions[i]
        if sampler.uniform() < min(1.0, float(p[token] / q[token])):
            continue
        residual = torch.clamp(p - q, min=0.0)
        total = float(residual.sum())
        return i, sampler.pick(residual / total if total > 0 else p)
    return len(proposal), sampler.pick(target_distributions[len(proposal)])


def _commit(proposal: list[int], accepted: int, target_token: int, room: int,
            eos_ids: frozenset[int]) -> tuple[list[int], bool]:
    """The tokens this round adds, cut after an EOS or at the answer budget; and whether EOS was hit."""
    tokens = (proposal[:accepted] + [target_token])[:room]
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1], True
    return tokens, False


# ---- the loop ----------------------------------------------------------------------------


def speculate(pair: ModelPair, prompt_ids: list[int], policy: Policy, max_new_tokens: int,
              temperature: float = 0.0, seed: int | None = None,
              make_drafter: MakeDrafter = Drafter.for_pair) -> Iterator[Trace]:
    """Speculative decoding of one prompt under one lookahead policy, one round at a time.

    Yields the same `Trace` before the first round, after each draft step (the proposal in
    `trace.pending`, before the target's verdict; skipped when nothing was drafted) and after
    every round, so a caller can show the draft proposing and the target deciding as they happen.
    Stop by no longer asking for the next one: between rounds (`trace.pending` is None) the trace
    keeps `stop_reason="stopped"` and every pass it counts. `wall_s` counts this function's own
    time, not the caller's between yields. `make_drafter` makes what proposes (see `MakeDrafter`).
    """
    started = time.perf_counter()
    sampler = Sampler(temperature, seed, pair.device)
    drafter = make_drafter(pair, prompt_ids)
    verifier = CachedModel(pair.target, pair.vocab_size, pair.device)
    sequence = list(prompt_ids)
    trace = _new_trace(policy, temperature, seed)
    answer = trace.token_ids
    trace.wall_s = time.perf_counter() - started
    yield trace
    while len(answer) < max_new_tokens:
        started = time.perf_counter()
        room = max_new_tokens - len(answer)
        # One slot is kept for the target's own token, as transformers does.
        budget = max(0, min(policy.start_round(len(answer)), room - 1))
        threshold = policy.threshold

        # inference_mode is not held across a yield: the caller's code runs there.
        with torch.inference_mode():
            proposal = draft(drafter, sequence, budget, policy, sampler, pair.eos_token_ids)
        if proposal.ids:  # the proposal, shown before the verdict
            trace.pending = Pending(proposal.ids, proposal.probs)
            trace.wall_s += time.perf_counter() - started
            yield trace
            started = time.perf_counter()
        with torch.inference_mode():
            verify_started = time.perf_counter()
            accepted, target_token = accept(proposal, verify(verifier, sequence, proposal.ids), sampler)
            verify_s = time.perf_counter() - verify_started
        committed, hit_eos = _commit(proposal.ids, accepted, target_token, room, pair.eos_token_ids)
        accepted = min(accepted, len(committed))
        verifier.crop(len(sequence) + accepted)  # the drafter keeps what still holds at its next start
        sequence += committed
        answer += committed
        policy.end_round(len(proposal.ids), accepted, proposal.probs)
        trace.pending = None
        trace.rounds.append(Round(
            index=len(trace.rounds), position=len(answer) - len(committed), budget=budget,
            draft_ids=proposal.ids, draft_probs=proposal.probs, draft_entropies=proposal.entropies,
            accepted=accepted, target_id=target_token if len(committed) > accepted else None,
            draft_passes=proposal.passes, draft_s=proposal.seconds, verify_s=verify_s, threshold=threshold,
            draft_prefill_s=proposal.prefill_s, draft_source=proposal.source,
        ))
        if hit_eos or len(answer) >= max_new_tokens:
            trace.stop_reason = "eos" if hit_eos else "max_new_tokens"
        trace.wall_s += time.perf_counter() - started
        yield trace
        if hit_eos:
            return


def _new_trace(policy: Policy, temperature: float, seed: int | None) -> Trace:
    return Trace(policy=policy.name, label=policy.label, params=policy.params, token_ids=[], rounds=[], wall_s=0.0,
                 stop_reason="stopped", temperature=temperature, seed=seed if temperature > 0 else None)


def generate(pair: ModelPair, prompt_ids: list[int], policy: Policy, max_new_tokens: int,
             temperature: float = 0.0, seed: int | None = None,
             should_stop: Callable[[], bool] | None = None, make_drafter: MakeDrafter = Drafter.for_pair) -> Trace:
    """`speculate` run to the end, or until `should_stop()` says so between rounds."""
    return _run(speculate(pair, prompt_ids, policy, max_new_tokens, temperature, seed, make_drafter), should_stop)


def decode_target_only(pair: ModelPair, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
                       seed: int | None = None) -> Iterator[Baseline]:
    """Plain autoregressive decoding with the target alone, one forward pass per token; yields the
    same `Baseline` before the first token and after every token (stop by no longer asking, as
    with `speculate`; `wall_s` likewise counts only this function's own time)."""
    started = time.perf_counter()
    sampler = Sampler(temperature, seed, pair.device)
    verifier = CachedModel(pair.target, pair.vocab_size, pair.device)
    feed = list(prompt_ids)
    baseline = Baseline(token_ids=[], wall_s=0.0, stop_reason="stopped", temperature=temperature,
                        seed=seed if temperature > 0 else None)
    baseline.wall_s = time.perf_counter() - started
    yield baseline
    while len(baseline.token_ids) < max_new_tokens:
        started = time.perf_counter()
        with torch.inference_mode():
            token = sampler.pick(sampler.distribution(verifier.forward(feed)[-1]))
        baseline.token_ids.append(token)
        if len(baseline.token_ids) == 1:
            baseline.prefill_s = time.perf_counter() - started
        feed = [token]
        hit_eos = token in pair.eos_token_ids
        if hit_eos or len(baseline.token_ids) >= max_new_tokens:
            baseline.stop_reason = "eos" if hit_eos else "max_new_tokens"
        baseline.wall_s += time.perf_counter() - started
        yield baseline
        if baseline.stop_reason != "stopped":
            return


def target_only(pair: ModelPair, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
                seed: int | None = None, should_stop: Callable[[], bool] | None = None) -> Baseline:
    """`decode_target_only` run to the end, or until `should_stop()` says so between tokens."""
    return _run(decode_target_only(pair, prompt_ids, max_new_tokens, temperature, seed), should_stop)


def _run(steps: Iterator, should_stop: Callable[[], bool] | None):
    """Drive a step-by-step decoder, asking `should_stop` between rounds; its record at the end."""
    record = next(steps)  # yielded before any model work, updated in place by every step
    while True:
        between_rounds = getattr(record, "pending", None) is None  # a drafted round is always verified
        if between_rounds and should_stop is not None and should_stop():
            break
        if next(steps, None) is None:
            break
    return record
