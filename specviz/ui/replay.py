"""Round-by-round replay: one round of a trace explained step by step, as data and as escaped HTML."""

from __future__ import annotations

import html
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..decoding.trace import Round, Trace
from ..errors import SpecVizError
from ..explain.analysis import rule_rounds
from .render import PENDING_LOOK

# ---- round-by-round replay -----------------------------------------------------------------

# Each round shown plays "draft, then verdict": for REVEAL_S its draft tokens look pending
# (render.py's PENDING_LOOK) and the verdicts are hidden; then both appear. CSS only, so
# stepping stays instant, and a viewer who asks for reduced motion sees the verdict at once.
REVEAL_S = 0.8
REPLAY_CSS = f"""
@keyframes specviz-drafted {{
  from {{ {PENDING_LOOK} text-decoration: none; border-color: transparent; }}
}}
@keyframes specviz-judged {{ from {{ opacity: 0; }} }}
.specviz-replay .replay-reveal {{ animation: specviz-drafted 0.15s ease-out {REVEAL_S}s backwards; }}
.specviz-replay .replay-verdict {{ animation: specviz-judged 0.15s ease-out {REVEAL_S}s backwards; }}
@media (prefers-reduced-motion: reduce) {{
  .specviz-replay .replay-reveal, .specviz-replay .replay-verdict {{ animation: none; }}
}}
"""

# Gradio updates an HTML component in place, reusing its elements, and a CSS animation that has
# run does not run again on the same element. So when the panel shows another round (or policy),
# its animations are restarted: dropped for one style recalculation, then given back.
REPLAY_REVEAL_JS = """
() => {
  let shown = null;
  const restart = () => {
    const step = document.querySelector('#replay-panel .specviz-replay[data-round]');
    const key = step ? step.dataset.label + '|' + step.dataset.round : null;
    if (!step || key === shown) return;
    shown = key;
    const parts = step.querySelectorAll('.replay-reveal, .replay-verdict');
    parts.forEach((el) => { el.style.animation = 'none'; });
    void step.offsetWidth;
    parts.forEach((el) => { el.style.animation = ''; });
  };
  new MutationObserver(restart).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                        attributeFilter: ['data-round', 'data-label']});
}
"""


class StopReason(NamedTuple):
    code: str  # "budget", "threshold", "entropy", "price", "eos", "none"
    text: str


def _piece(texts: Sequence[str], ids: Sequence[int], i: int) -> str:
    return texts[i] if i < len(texts) else f"[{ids[i]}]"


def stop_reason(r: Round, trace: Trace, eos_ids: Collection[int] = ()) -> StopReason:
    """Why the draft stopped proposing in round `r`: budget, threshold, entropy bound, price (the
    cost-aware rule) or EOS.

    The engine stops after a token that is EOS or that the policy rejects (probability below the
    threshold in force, entropy above the bound), else when the round's budget is used up.
    Without `eos_ids` (an imported run) EOS is inferred when nothing else explains an early stop.
    """
    priced = _priced_stop(r, trace) if trace.policy == "costaware" else None
    if priced is not None and (r.lookahead == 0 or r.draft_ids[-1] not in set(eos_ids)):
        return priced
    if r.lookahead == 0:
        return StopReason("budget", f"nothing drafted: the budget was {r.budget} (the answer was nearly complete)")
    last = r.lookahead - 1
    if r.draft_ids[last] in set(eos_ids):
        return StopReason("eos", "the draft proposed end of text (EOS)")
    if r.threshold is not None and last < len(r.draft_probs) and r.draft_probs[last] < r.threshold:
        return StopReason("threshold", f"probability {r.draft_probs[last]:.2f} fell below the threshold "
                                       f"{r.threshold:.2f}")
    bound = trace.params.get("max_entropy") if trace.policy == "entropy" else None
    if bound is not None and last < len(r.draft_entropies) and r.draft_entropies[last] > float(bound):
        return StopReason("entropy", f"entropy {r.draft_entropies[last]:.2f} nats rose above the bound "
                                     f"{float(bound):g} nats")
    if r.lookahead >= r.budget:
        return StopReason("budget", f"budget reached: {r.budget} token{'s' if r.budget != 1 else ''} allowed "
                                    "this round")
    if not eos_ids:
        return StopReason("eos", "the draft proposed end of text (EOS)")
    return StopReason("none", "stopped early (no reason recorded)")


def _priced_stop(r: Round, trace: Trace) -> StopReason | None:
    """Why the cost-aware rule stopped: no window of the round beat plain decoding, or the next
    token's expected worth fell below the run's rate."""
    rounds = {rr.index: rr for rr in rule_rounds(trace)}
    seen = rounds.get(r.index)
    if seen is None:
        return None
    if not seen.plan.drafts:
        plan = seen.plan
        return StopReason("price", f"the round was not worth drafting: no window beat plain decoding's "
                                   f"{plan.plain_rate * 1000:.1f} tokens/s (its first token expected accepted at "
                                   f"{plan.chance:.2f})")
    if not seen.decisions or seen.decisions[-1].drafts:
        return None  # it wanted more: the budget or the end of text stopped it
    last = seen.decisions[-1]
    return StopReason("price", f"token {last.window} was not worth its price: {last.gain:.2f} expected tokens for "
                               f"{last.cost_ms:.0f} ms, {last.gain / last.cost_ms * 1000:.1f} tokens/s, below the "
                               f"run's {last.rate * 1000:.1f} tokens/s")


@dataclass(frozen=True)
class DraftToken:
    text: str
    prob: float | None
    entropy: float | None
    verdict: str  # "accepted", "rejected" (the first wrong one), "discarded" (after it)


@dataclass(frozen=True)
class ReplayStep:
    """Everything the replay panel shows for one round of one trace."""

    label: str
    index: int  # 0-based round index
    rounds: int  # rounds in the trace
    context: str  # committed answer text before this round
    tokens: list[DraftToken]
    stop: StopReason
    added_text: str | None  # the target's own token
    added_kind: str | None  # "correction" or "bonus"
    budget: int
    threshold: float | None
    target_passes: int  # so far, this round included
    draft_passes: int  # so far, this round included
    copied_from: int | None = None  # a lookup draft's: where in the prompt and answer it copied from
    copied: int | None = None  # how many of its tokens were copied (None: all); a hybrid draft's model drafts the rest


def replay_step(trace: Trace, index: int, eos_ids: Collection[int] = ()) -> ReplayStep:
    """The replay data of round `index` (clamped to the trace's rounds)."""
    if not trace.rounds:
        raise SpecVizError(f"{trace.label} has no rounds to replay.")
    index = max(0, min(int(index), len(trace.rounds) - 1))
    context = []
    for r in trace.rounds[:index]:
        context += [_piece(r.draft_texts, r.draft_ids, i) for i in range(r.accepted)]
        if r.target_id is not None:
            context.append(r.target_text if r.target_text is not None else f"[{r.target_id}]")
    r = trace.rounds[index]
    tokens = []
    for i in range(r.lookahead):
        verdict = "accepted" if i < r.accepted else "rejected" if i == r.accepted else "discarded"
        tokens.append(DraftToken(_piece(r.draft_texts, r.draft_ids, i),
                                 r.draft_probs[i] if i < len(r.draft_probs) else None,
                                 r.draft_entropies[i] if i < len(r.draft_entropies) else None, verdict))
    added = None if r.target_id is None else (r.target_text if r.target_text is not None else f"[{r.target_id}]")
    return ReplayStep(label=trace.label, index=index, rounds=len(trace.rounds), context="".join(context),
                      tokens=tokens, stop=stop_reason(r, trace, eos_ids), added_text=added, added_kind=r.target_kind,
                      budget=r.budget, threshold=r.threshold, target_passes=index + 1,
                      draft_passes=sum(x.draft_passes for x in trace.rounds[: index + 1]), copied_from=r.draft_source,
                      copied=r.draft_copied)


def visible_whitespace(text: str) -> str:
    """A token with its spaces, newlines and tabs drawn (␣ ⏎ ⇥), ∅ for an empty one: for the replay table."""
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") if text else "∅"


_VERDICT_TEXT = {"accepted": "accepted", "rejected": "rejected: the target disagrees",
                 "discarded": "thrown away (after a rejection)"}


def _copied_part(step: ReplayStep) -> str:
    """A hybrid round's copied share: "the first 3 tokens " ("" when every token was copied)."""
    if step.copied is None or step.copied >= len(step.tokens):
        return ""
    return f"the first {step.copied} token{'s' if step.copied != 1 else ''} "


def _modeled_part(step: ReplayStep) -> str:
    """The rest of a hybrid round: "; the rest by the draft model (probability: its own)"."""
    if step.copied is None or step.copied >= len(step.tokens):
        return ""
    return "; the rest drafted by the draft model (probability: its own)"


def replay_html(step: ReplayStep) -> str:
    """The replay panel for one round; every model or user text is escaped.

    The round plays as it ran: the draft's tokens first show as pending, and the target's verdict
    (their colours, the verdict column, the token it adds) follows a moment later; the classes
    `replay-reveal` and `replay-verdict` carry that animation (REPLAY_CSS)."""
    e = html.escape
    rows = []
    for i, t in enumerate(step.tokens):
        kind = "accepted" if t.verdict == "accepted" else "rejected"
        prob = "–" if t.prob is None else f"{t.prob:.2f}"
        entropy = "–" if t.entropy is None else f"{t.entropy:.2f}"
        rows.append(f'<tr data-verdict="{t.verdict}"><td>{i + 1}</td>'
                    f'<td><span class="tok tok-{kind} replay-reveal">{e(visible_whitespace(t.text))}</span></td>'
                    f'<td>{prob}</td><td>{entropy}</td><td class="replay-verdict">{e(_VERDICT_TEXT[t.verdict])}</td>'
                    "</tr>")
    table = ('<table class="replay-drafts"><thead><tr><th>#</th><th>draft token</th><th>probability</th>'
             '<th>entropy (nats)</th><th>target\'s verdict</th></tr></thead><tbody>'
             + ("".join(rows) or '<tr><td colspan="5">no draft tokens this round</td></tr>')
             + "</tbody></table>")
    if step.added_text is None:
        added = "none (the answer ended)"
    else:
        what = "correction, replacing the first rejected token" if step.added_kind == "correction" else \
            "bonus token, after every draft token was accepted"
        added = (f'<span class="tok tok-{e(step.added_kind or "correction")}">{e(visible_whitespace(step.added_text))}'
                 f"</span> ({what})")
    threshold = "" if step.threshold is None else f" · threshold in force {step.threshold:.2f}"
    copied = "" if step.copied_from is None else (
        f' <span data-replay="copied">{_copied_part(step)}copied from token {step.copied_from} of the prompt and '
        "answer on (prompt lookup; probability: the share of the matched n-gram's earlier occurrences that "
        f"continue so){_modeled_part(step)}</span>")
    return (
        f'<div class="specviz-replay" data-round="{step.index}" data-label="{e(step.label)}">'
        f'<div class="replay-head">Round <span data-replay="round">{step.index + 1}</span> of '
        f'<span data-replay="rounds">{step.rounds}</span> · {e(step.label)} · budget {step.budget}{threshold}</div>'
        f'<div class="replay-line"><b>Context so far:</b> <span class="replay-context">'
        f'{e(step.context) if step.context else "<i>(nothing yet: first round)</i>"}</span></div>'
        f'<div class="replay-line"><b>The draft proposes:</b>{copied}</div>{table}'
        f'<div class="replay-line"><b>Drafting stopped:</b> <span data-replay="stop" data-code="{e(step.stop.code)}">'
        f"{e(step.stop.text)}</span></div>"
        f'<div class="replay-line replay-verdict"><b>The target adds:</b> {added}</div>'
        f'<div class="replay-line replay-counts">Target passes so far: <b data-replay="target_passes">'
        f'{step.target_passes}</b> · draft passes so far: <b data-replay="draft_passes">{step.draft_passes}</b></div>'
        "</div>"
    )
