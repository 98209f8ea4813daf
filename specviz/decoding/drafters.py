"""What proposes a round's tokens: the `Drafter` interface, and the drafters behind the draft
kinds of drafts.py: a draft model fed for exact guesses (`ModelDrafter`), fed as transformers
feeds it (`TransformersDrafter`), or a proposal read from the text so far (`TextDrafter`: prompt
lookup, and any draft whose proposal is a function of the text).

`speculate` (engine.py) makes one drafter per run through a `MakeDrafter`, which a draft kind's
`make` gives (drafts.DRAFTS); the engine's loop knows only the `Drafter` interface. A new draft
source is a kind in drafts.py's registry and, where it reads the text, a module with its proposal
rule (as lookup.py): see docs/DESIGN.md, "Adding a draft source".

The draft model is fed so that its guess at an answer position is a function of the text alone,
whatever the rounds before were. That is what makes the oracle the true ideal and the what-if
replay exact; it costs one extra draft call after every round whose drafts were all accepted, and
a draft that is not row-exact reads its backlog one token per call.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from . import feeding
from .lookup import Lookup, drafted
from .policies import DraftStep, Policy

if TYPE_CHECKING:
    from ..pair.models import ModelPair


class Drafter(Protocol):
    """What the engine asks of a draft source each round (llama.cpp's common_speculative has the
    same begin / draft / accept shape over every draft type):

    - `propose(sequence, budget, policy, sampler, eos_ids)`: up to `budget` tokens after
      `sequence` (the prompt and the answer so far), asking `policy.keep_drafting` after each;
    - `accept(sequence, accepted)`: read what was accepted, after the target's verdict: the text
      now, and how many of the proposed tokens the target kept;
    - `keep_prefix(sequence)`: forget whatever it read past the longest prefix it shares with
      `sequence` (a drafter with a cache does so at its next start; one without has nothing to keep);
    - `passes` and `prefill_s`: its passes, forward calls so far (0 for a draft that is no model),
      and the seconds of the prompt's prefill among them.

    What a step cost is measured around `propose` (engine.draft: the seconds, and the passes and
    prefill seconds it added); what the cost-aware rule is told a step costs is the draft kind's
    (`drafts.DraftKind.prices`)."""

    passes: int
    prefill_s: float

    def propose(self, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
                eos_ids: frozenset[int]) -> Proposal: ...

    def accept(self, sequence: list[int], accepted: int) -> None: ...

    def keep_prefix(self, sequence: list[int]) -> None: ...


# What `speculate` calls to make a run's drafter, given the pair and the prompt: a draft kind's
# `make` (drafts.py), or `ModelDrafter.for_pair` / `TransformersDrafter.for_pair` directly.
MakeDrafter = Callable[["ModelPair", list[int]], Drafter]


class CachedModel:
    """A causal LM with its KV cache; `length` is how many tokens the cache holds."""

    def __init__(self, model: torch.nn.Module, vocab_size: int, device: torch.device):
        from ..pair import forward
        from ..pair.kvcache import new_cache

        self.model = model
        # the same bits as calling the model, without transformers' per-call machinery, where it can
        self.lean = forward.logits if forward.supports(model) else None
        self.vocab_size = vocab_size
        self.device = device
        self.cache = new_cache(model.config)
        self.length = 0

    def forward(self, token_ids: list[int], keep: int = 1) -> torch.Tensor | None:
        """Feed tokens after the cached ones; return fp32 logits for the last `keep` of them.
        With keep=0 only the cache is filled: the output layer is skipped and None returned."""
        inputs = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        self.length += len(token_ids)
        if self.lean is not None:
            logits = self.lean(self.model, inputs, self.cache, keep)
            return None if logits is None else logits[0, -keep:, : self.vocab_size].float()
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


class ModelDrafter:
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
      (`row_exact`, checked at load: forward.rows_exact) reads them in one such call (feeding.py), which gives
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
    def for_pair(cls, pair: ModelPair, prompt_ids: list[int]) -> ModelDrafter:
        """A `MakeDrafter`: the pair's draft model, for one run on `prompt_ids`."""
        return cls(pair.draft, pair.vocab_size, pair.device, prompt_ids, row_exact=pair.draft_row_exact)

    def propose(self, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
                eos_ids: frozenset[int]) -> Proposal:
        """Up to `budget` tokens, one draft forward pass each (plus the catch-up calls)."""
        proposal = Proposal()
        if budget > 0:
            self.draft_on(proposal, sequence, budget, policy, sampler, eos_ids)
        return proposal

    def draft_on(self, proposal: Proposal, text: list[int], budget: int, policy: Policy, sampler: Sampler,
                 eos_ids: frozenset[int]) -> None:
        """The model's tokens after `text`, added to `proposal` and numbered on after what it holds
        (a hybrid draft's copied tokens), until the budget, an EOS or the policy stops them."""
        logits = self.start(text)
        for index in range(len(proposal.ids), budget):
            distribution = sampler.distribution(logits)
            token = sampler.pick(distribution)
            step = DraftStep(index, token, *describe(distribution, token))
            proposal.add(step, distribution)
            if token in eos_ids or not policy.keep_drafting(step) or index + 1 == budget:
                return
            logits = self.next(token)

    def accept(self, sequence: list[int], accepted: int) -> None:
        """Nothing now: the committed tokens are read at the next start (the catch-up), so that
        the round that needs them counts those calls."""

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
        if not self.tokens and feeding.prefill_calls(len(self.prompt_ids)):
            started = time.perf_counter()
            self.read(self.prompt_ids[:-1])
            self.prefill_s += time.perf_counter() - started
        *catch_up, last = feeding.calls(sequence[len(self.tokens):], feeding.rows_per_call(self.row_exact))
        for tokens in catch_up:
            self.read(tokens)
        return self.read(last, logits=True)

    def next(self, token: int) -> torch.Tensor:
        """The logits after the draft's own `token`, read on top of what the cache holds."""
        return self.read([token], logits=True)


class TransformersDrafter(ModelDrafter):
    """Feeds the draft as the installed transformers' assisted generation does: the whole prompt
    in the first round, then at each round's start one call over the last committed tokens.
    Up to transformers 5.24 that call re-reads the last two of them; from 5.25 on it reads only
    what the draft's cache lacks (the last one, or the last two after a round whose drafts were
    all accepted). The passes are the same; the tokens a call reads are not, and a quantized
    draft turns that into other guesses. Its passes and tokens match transformers'; its guesses
    depend on the round structure (see `ModelDrafter`)."""

    def start(self, sequence: list[int]) -> torch.Tensor:
        reread = 2 if _transformers_rereads_two() else 1
        self.keep_prefix(sequence[: max(0, len(sequence) - reread)])
        return self.read(sequence[len(self.tokens):], logits=True)


class TextDrafter:
    """Proposes from the text so far with `find` (a draft kind's proposal rule, drafts.TextDraft:
    prompt lookup copies what followed the last n-gram's first earlier occurrence, lookup.py).
    No model, no forward pass (`passes` stays 0); its time is measured all the same. For
    speculative sampling its distribution is all on the proposed token, which rejection sampling
    accepts with the target's probability for it: the target's distribution is kept."""

    def __init__(self, find: Callable[[list[int], frozenset[int]], Lookup], vocab_size: int, device: torch.device):
        self.find = find
        self.vocab_size = vocab_size
        self.device = device
        self.passes = 0
        self.prefill_s = 0.0

    @classmethod
    def using(cls, find: Callable[[list[int], frozenset[int]], Lookup]) -> MakeDrafter:
        """A `MakeDrafter` for `speculate`: a text drafter proposing with `find`."""
        return lambda pair, prompt_ids: cls(find, pair.vocab_size, pair.device)

    def propose(self, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
                eos_ids: frozenset[int]) -> Proposal:
        proposal = Proposal()
        if budget <= 0:
            return proposal
        found = self.find(sequence, eos_ids)
        proposal.source = found.source
        for step in drafted(found, budget, policy):
            proposal.add(step, None if sampler.greedy else self._certain(step.token_id))
        return proposal

    def accept(self, sequence: list[int], accepted: int) -> None:
        """Nothing: its next proposal reads the text as it is then."""

    def keep_prefix(self, sequence: list[int]) -> None:
        """Nothing: it keeps no state between rounds."""

    def _certain(self, token: int) -> torch.Tensor:
        distribution = torch.zeros(self.vocab_size, device=self.device)
        distribution[token] = 1.0
        return distribution


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


@dataclass
class Proposal:
    """The draft's tokens for one round, with its probability for each, the entropy of each
    next-token distribution, and the distributions themselves (speculative sampling needs them)."""

    ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    distributions: list[torch.Tensor] = field(default_factory=list)
    source: int | None = None  # a text draft's (a lookup's): where in the text its tokens were copied from
    copied: int | None = None  # how many of its tokens, from the first, were copied from `source` (None: all)
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
