"""One pair's part of a report, section by section: the headline (1), the oracle's jumps (2), the
dynamic rule against the heuristic (3), why, for this pair (4: calibration and per-pass costs),
and the cost-aware rule against the best threshold in hindsight (5), each with its verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...explain.analysis import Judged, auc, split_at
from ...explain.costs import StudyPassCosts
from ...explain.hindsight import Hindsight, SavedRun, best_dynamic
from ...explain.sweep import can_replay
from ..records import ModeResult, PromptResult
from .figures import (
    HISTOGRAM_BINS,
    PolicyTotals,
    SuiteFigures,
    _ratio,
    modeled_time,
    oracle_lowest,
    preset_figures,
    prompt_wins,
)
from .text import _change, _f, _ms, _n, _pct, _x
from .verdicts import (
    AUC_WEAKLY,
    AUC_WELL,
    COST_AWARE_RIVALS,
    FEW_REJECTED,
    HEADLINE_SUITE,
    HINDSIGHT_MARGIN,
    STUDY_HEADLINE,
    THRESHOLD,
    Verdicts,
    decided_by_measured_time,
    dynamic_wins,
    faster,
    headline_holds,
    majority,
    verdict,
)


def headline_section(figures: SuiteFigures | None) -> tuple[list[str], bool | None]:
    lines = ["### 1. A fixed lookahead wastes work (the MBPP headline)", ""]
    if figures is None or "static" not in figures.totals or "oracle" not in figures.totals:
        return lines + ["Not checked: the coding suite was not run for this preset.", ""], None
    first = figures.results[0]
    f_static, f_oracle = first.mode("static"), first.mode("oracle")
    static, oracle = figures.totals["static"], figures.totals["oracle"]
    (s_t, s_d), (o_t, o_d) = STUDY_HEADLINE["static"], STUDY_HEADLINE["oracle"]
    holds = headline_holds(static, oracle)
    lines += [
        (f"Target and draft forward passes, in the study's format. Ours: the coding suite's first prompt "
        f"({first.prompt_id}, {first.new_tokens} new tokens) and the sum over its {_n(len(figures.results), 'prompt')} "
        f"({figures.new_tokens} new tokens)."), "",
        ("| policy | study (MBPP prompt): target | draft | ours, first prompt: target | draft "
        "| ours, suite sum: target | draft |"),
        "|---|---|---|---|---|---|---|",
        (f"| static k=5 | {s_t} | {s_d} | {f_static.target_passes} | {f_static.draft_passes} "
        f"| {static.target_passes} | {static.draft_passes} |"),
        (f"| oracle | {o_t} | {o_d} | {f_oracle.target_passes} | {f_oracle.draft_passes} "
        f"| {oracle.target_passes} | {oracle.draft_passes} |"),
        (f"| oracle vs static | {_change(o_t, s_t)} | {_change(o_d, s_d)} "
        f"| {_change(f_oracle.target_passes, f_static.target_passes)} "
        f"| {_change(f_oracle.draft_passes, f_static.draft_passes)} "
        f"| {_change(oracle.target_passes, static.target_passes)} "
        f"| {_change(oracle.draft_passes, static.draft_passes)} |"),
        "",
        (f"Summed over the suite the oracle needs {oracle.target_passes} target passes against static's "
         f"{static.target_passes} ({'fewer' if oracle.target_passes < static.target_passes else 'not fewer'}) and "
         f"{oracle.draft_passes} draft passes against {static.draft_passes} "
         f"({'fewer' if oracle.draft_passes < static.draft_passes else 'not fewer'}): {verdict(holds)}. "
         f"On the first prompt alone: "
         f"{'fewer of both' if headline_holds(_as_totals(f_static), _as_totals(f_oracle)) else 'not fewer of both'}."),
        "",
    ]
    return lines, holds


def _as_totals(mode: ModeResult) -> PolicyTotals:
    return PolicyTotals(mode.label, mode.policy, 1, mode.target_passes, mode.draft_passes, mode.accepted,
                        mode.wall_s, 0.0, int(mode.lossless is True), mode.drafted)


def jumps_section(suites: Sequence[SuiteFigures]) -> tuple[list[str], bool | None]:
    lines = ["### 2. The oracle's lookahead jumps around", "",
             ("The oracle's lookahead in every round of every prompt: how often each value occurs (rounds), its "
             "percentiles, the share of rounds at its most common value, and how much it changes from one round to "
             "the next within a prompt."), "",
             "| suite | rounds | " + " | ".join(f"k={label}" for label, _, _ in HISTOGRAM_BINS)
             + " | p10 / p25 / p50 / p75 / p90 | most common k (share) | mean abs change | changes of 2+ | jumps? |",
             "|---|---" + "|---" * len(HISTOGRAM_BINS) + "|---|---|---|---|---|"]
    flags = []
    for s in suites:
        j = s.jumps
        if not j.rounds:
            continue
        flags.append(j.jumps_around)
        pcts = " / ".join(f"{j.percentiles[q]:g}" for q in (10, 25, 50, 75, 90))
        lines.append(f"| {s.suite} | {j.rounds} | " + " | ".join(str(j.histogram[label]) for label, _, _ in
                                                                 HISTOGRAM_BINS)
                     + f" | {pcts} | {j.modal_value} ({_pct(j.modal_share)}) | {_f(j.mean_abs_change)} "
                     f"| {_pct(j.share_change_2_plus)} | {'yes' if j.jumps_around else 'no'} |")
    if not flags:
        return lines + ["", "Not checked: no oracle rounds.", ""], None
    holds = majority(flags)
    lines += ["", f"Jumps around in {sum(flags)} of {len(flags)} suites: {verdict(holds)}.", ""]
    return lines, holds


def dynamic_section(suites: Sequence[SuiteFigures], measured: bool = False) -> tuple[list[str], bool | None]:
    """Section 3; `measured`: the verdict follows measured time (a pair with a draft of its own)."""
    decides = "measured" if measured else "modeled"
    lines = ["### 3. The dynamic rule against the heuristic", "",
             ("Per suite, summed over its prompts. Measured speedup = target-only wall time / the policy's wall time "
             "(totals); median = the median over prompts of that ratio per prompt; modeled speedup from this suite's "
             "own per-pass costs (section 4 and the rules above). Lossless = prompts whose output equals target-only "
             f"decoding. For this pair **{decides}** time decides (the rules above)."), ""]
    flags = []
    for s in suites:
        dyn, heu = s.totals.get("dynamic"), s.totals.get("heuristic")
        lines += [(f"**{s.suite}** ({_n(len(s.results), 'prompt')}, {s.new_tokens} new tokens; target-only "
                  f"{s.target_only_wall_s:.1f} s measured, {s.target_only_modeled_s:.1f} s modeled)"), "",
                  ("| policy | target passes | draft passes | acceptance | measured speedup | median measured "
                   "speedup | modeled speedup | lossless |"), "|---|---|---|---|---|---|---|---|"]
        for t in s.totals.values():
            lines.append(f"| {t.label} | {t.target_passes} | {t.draft_passes} | {_f(t.acceptance)} "
                         f"| {_x(s.measured_speedup(t.policy))} | {_x(s.median_measured_speedup(t.policy))} "
                         f"| {_x(s.modeled_speedup(t.policy))} | {t.lossless}/{t.prompts} |")
        if dyn is None or heu is None:
            lines += ["", "Not checked: dynamic or heuristic missing.", ""]
            continue
        wins = dynamic_wins(dyn, heu, measured)
        flags.append(wins)
        by_model = prompt_wins(s.results, "dynamic", "heuristic", s.costs)
        by_wall = prompt_wins(s.results, "dynamic", "heuristic", s.costs, measured=True)
        median = s.median_measured_speedup("dynamic")
        faster = "" if median is None else (
            f" The median prompt ran {median:.2f}x as fast with dynamic as with the target alone "
            f"({'faster' if median > 1 else 'not faster'} in wall-clock time).")
        lines += ["", (f"Dynamic {'beats' if wins else 'does not beat'} the heuristic here by {decides} time "
                       f"(measured {_x(s.measured_speedup('dynamic'))} vs {_x(s.measured_speedup('heuristic'))}; "
                       f"modeled {s.modeled_speedup('dynamic'):.2f}x vs {s.modeled_speedup('heuristic'):.2f}x). "
                       f"Prompts won, by measured time: dynamic {by_wall.first}, heuristic {by_wall.second}, ties "
                       f"{by_wall.ties}; by modeled time: dynamic {by_model.first}, heuristic {by_model.second}, "
                       f"ties {by_model.ties}.{faster}"), ""]
    if not flags:
        return lines, None
    holds = majority(flags)
    lines += [f"Dynamic wins in {sum(flags)} of {len(flags)} suites ({decides} time): {verdict(holds)}.", ""]
    return lines, holds


def _both(s: SuiteFigures, policy: str) -> str:
    return f"{_x(s.measured_speedup(policy))} ({_x(s.modeled_speedup(policy))} modeled)"


def _slowest(s: SuiteFigures) -> str:
    """The cost-aware rule's lowest modeled speedup over the suite's prompts, and which prompt: where
    drafting does not pay it should decode plainly, at about target-only's speed."""
    speedups = [(s.costs.target_only_modeled_time(r.new_tokens) / t, r.prompt_id) for r in s.results
                if (m := r.mode("costaware")) is not None and (t := modeled_time(s.costs, r, m)) > 0]
    if not speedups:
        return "n/a"
    worst, prompt = min(speedups)
    return f"{_x(worst)} ({prompt})"


def cost_aware_section(suites: Sequence[SuiteFigures], saved: Mapping[tuple[str, str, str, int], SavedRun],
                       measured: bool = False) -> tuple[list[str], bool | None]:
    """Section 5: the cost-aware rule against dynamic 0.4, the heuristic and the best threshold in
    hindsight (None: no suite ran it)."""
    if not any("costaware" in s.totals for s in suites):
        return [], None
    decides = "measured" if measured else "modeled"
    lines = ["### 5. The cost-aware rule", "",
             ("Per suite, summed over its prompts: speedups over target-only decoding, measured (wall time) and "
              "modeled (section 4's per-pass costs); the best dynamic threshold in hindsight is modeled only "
              f"(the rules above). For this pair **{decides}** time decides wins."), "",
             ("| suite | cost-aware | dynamic 0.4 | heuristic | best threshold in hindsight | cost-aware / best "
              "(modeled time) | wins | keeps up | its slowest prompt against target-only (modeled) |"),
             "|---|---|---|---|---|---|---|---|---|"]
    wins_flags, keeps_flags = [], []
    for s in suites:
        ca = s.totals.get("costaware")
        if ca is None or any(p not in s.totals for p in COST_AWARE_RIVALS):
            continue
        wins = all(faster(ca, s.totals[p], measured) for p in COST_AWARE_RIVALS)
        # runs from before a lookup draft's comparison kept its prompt cannot be replayed
        runs = [saved[r.key] for r in s.results if r.key in saved and can_replay(saved[r.key].comparison)]
        best: Hindsight | None = best_dynamic(runs, s.costs) if len(runs) == len(s.results) else None
        over = ca.modeled_s / best.modeled_s if best is not None and best.modeled_s > 0 else None
        keeps = None if over is None else over <= 1 + HINDSIGHT_MARGIN
        wins_flags.append(wins)
        if keeps is not None:
            keeps_flags.append(keeps)

        hindsight = ("n/a (no what-if replay for these runs)" if best is None else
                     f"t={best.threshold:g}: {_x(s.target_only_modeled_s / best.modeled_s)} modeled")
        lines.append(f"| {s.suite} | {_both(s, 'costaware')} | {_both(s, 'dynamic')} | {_both(s, 'heuristic')} | {hindsight} "
                     f"| {'n/a' if over is None else f'{over:.3f}'} | {'yes' if wins else 'no'} "
                     f"| {'n/a' if keeps is None else ('yes' if keeps else 'no')} | {_slowest(s)} |")
    if not wins_flags:
        return lines + ["", "Not checked: dynamic or the heuristic missing.", ""], None
    all_checked = len(keeps_flags) == len(wins_flags)
    holds = majority(wins_flags) and all_checked and all(keeps_flags)
    lines += ["", (f"The cost-aware rule wins in {sum(wins_flags)} of {len(wins_flags)} suites ({decides} time) and "
                   f"keeps up with the best threshold in hindsight in {sum(keeps_flags)} of {len(wins_flags)}"
                   + ("" if all_checked else " (the others could not be replayed)")
                   + f": **{'holds' if holds else 'does not hold'}**."), ""]
    return lines, holds


def _calibration_words(value: float | None) -> str:
    if value is None:
        return "cannot be measured (no accepted or no rejected tokens)"
    if value >= AUC_WELL:
        return "separates accepted from rejected tokens well"
    if value >= AUC_WEAKLY:
        return "separates accepted from rejected tokens weakly"
    return "barely separates accepted from rejected tokens"


def why_section(suites: Sequence[SuiteFigures]) -> list[str]:
    lines = ["### 4. Why, for this pair", "",
             "Calibration from static k=5's judged draft tokens.", "",
             (f"| suite | judged tokens | accepted | AUC | accepted with p >= {THRESHOLD:g} | accepted with p < "
              f"{THRESHOLD:g} |"), "|---|---|---|---|---|---|"]
    everything: list[Judged] = []
    for s in suites:
        everything += s.judged
        split = split_at(s.judged, THRESHOLD)
        lines.append(f"| {s.suite} | {len(s.judged)} | {_pct(_ratio(sum(j.accepted for j in s.judged), len(s.judged)))} "
                     f"| {_f(auc(s.judged))} | {_pct(split.above_share)} of {split.above} "
                     f"| {_pct(split.below_share)} of {split.below} |")
    lines += [""] + costs_table(suites)
    pooled = auc(everything)
    rejected = sum(not j.accepted for j in everything)
    few = f"; with fewer than {FEW_REJECTED} rejections the AUC is a rough figure" if rejected < FEW_REJECTED else ""
    split = split_at(everything, THRESHOLD)
    fractions = [f"{ratio:.2f} ({s.suite})" for s in suites if (ratio := s.costs.draft_to_token_pass) is not None]
    lines += ["", (f"Over all suites the draft's probability {_calibration_words(pooled)} (AUC {_f(pooled)} on "
                   f"{len(everything)} judged tokens, {rejected} of them rejected{few}): "
                   f"{_pct(split.above_share)} of the tokens it gave {THRESHOLD:g} or more were accepted, "
                   f"{_pct(split.below_share)} of those below, where dynamic stops drafting. A draft call costs "
                   f"{', '.join(fractions) or 'n/a'} of a one-token target pass: every rejected draft token "
                   f"wastes that much, and every round the threshold ends early costs one more verification pass."), ""]
    return lines


def costs_table(suites: Sequence[SuiteFigures]) -> list[str]:
    """The per-pass costs behind the modeled times, and which suites timed the prefill apart."""
    lines = [("Costs per forward pass, the means behind the modeled times (the rules above): draft calls and "
              "verification passes over all four policies, one-token passes from target-only decoding. The passes "
              "that read the prompt cost per prompt and are shown apart where they were timed apart."), "",
             ("| suite | prefill timed apart | draft call | draft prefill call | target pass (1 token) "
              "| target-only first pass | verification pass | first verification pass | draft / target "
              "| verification / target |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for s in suites:
        c, timed = s.costs, sum(r.prefill_timed_apart for r in s.results)
        lines.append(f"| {s.suite} | {'yes' if c.prefill_apart else 'no'} ({timed} of {_n(len(s.results), 'record')}) "
                     f"| {_ms(c.draft_call_s or None)} | {_prefill_ms(c, c.draft_prefill_s)} "
                     f"| {_ms(c.target_token_s or None)} | {_prefill_ms(c, c.target_prefill_s)} "
                     f"| {_ms(c.verify_s or None)} | {_prefill_ms(c, c.first_verify_s)} "
                     f"| {_f(c.draft_to_token_pass)} | {_f(c.verify_to_token_pass)} |")
    return lines + ["", prefill_coverage_sentence(suites)]


def _prefill_ms(costs: StudyPassCosts, seconds: float) -> str:
    return _ms(seconds or None) if costs.prefill_apart else "not apart"


def prefill_coverage_sentence(suites: Sequence[SuiteFigures]) -> str:
    pooled = [s.suite for s in suites if not s.costs.prefill_apart]
    if not pooled:
        return "Every suite here timed the prompt's prefill apart."
    apart = [s.suite for s in suites if s.costs.prefill_apart]
    return ((f"The prefill was timed apart in {', '.join(apart)}; not in " if apart else "The prefill was not timed "
             "apart in ") + f"{', '.join(pooled)}: those records predate its timing (all of a suite's must have it), "
            "so there the passes that read the prompt are priced like any other, pooled, and the longer the prompts "
            "the more they inflate every per-pass cost. Re-running those suites with `--force` "
            f"(`python -m specviz study --preset {suites[0].preset} --force`, narrowed with `--suites`) times it.")


def exactness_sentence(results: Sequence[PromptResult]) -> str:
    """How often the oracle was lowest and the rounds met the ideal line, over these prompts."""
    lowest = [flag for r in results if (flag := oracle_lowest(r)) is not None]
    met = [flag for r in results for m in r.modes for rd in m.rounds if (flag := rd.meets_ideal) is not None]
    words = (f"The oracle is the true ideal: it needed no more target passes than any other policy on "
             f"{sum(lowest)} of {_n(len(lowest), 'prompt')}")
    if met:
        words += (f", and {sum(met)} of {_n(len(met), 'round')} of every policy accepted exactly "
                  f"min(its lookahead, the oracle's ideal at its start)")
    return words + "."


def prefill_coverage_line(records: Sequence[PromptResult]) -> str:
    """Per preset, the suites whose costs price the prefill apart (every record timed it) and the rest."""
    parts = []
    for preset in dict.fromkeys(r.preset for r in records):
        suites = list(dict.fromkeys(r.suite for r in records if r.preset == preset))
        apart = [s for s in suites if all(r.prefill_timed_apart for r in records if (r.preset, r.suite) == (preset, s))]
        pooled = [s for s in suites if s not in apart]
        words = ("every suite" if not pooled else
                 f"{', '.join(apart)}; not {', '.join(pooled)}" if apart else "none of its suites")
        parts.append(f"{preset}: {words}")
    return (f"The prompt's prefill timed apart (priced per prompt; section 4): {'; '.join(parts)}. Records made "
            f"before it was timed price it pooled with the other passes; re-running them with `--force` times it.")


def preset_sections(preset: str, done: Sequence[PromptResult], suites: Sequence[str],
                    saved: Mapping[tuple[str, str, str, int], SavedRun] | None,
                    intro: Sequence[str] = ()) -> tuple[list[str], Verdicts]:
    """One preset's part of a report (sections 1-5 under its own heading) and its verdicts."""
    figures = preset_figures(preset, done, suites)
    coding = next((f for f in figures if f.suite == HEADLINE_SUITE), None)
    headline, h = headline_section(coding)
    jumps, j = jumps_section(figures)
    dynamic, d = dynamic_section(figures, measured=decided_by_measured_time(preset))
    cost_aware, c = cost_aware_section(figures, saved or {}, measured=decided_by_measured_time(preset))
    lossless = sum(m.lossless is True for f in figures for r in f.results for m in r.modes)
    modes_run = sum(len(r.modes) for f in figures for r in f.results)
    suites_run = ", ".join(f"{f.suite} ({_n(len(f.results), 'prompt')})" for f in figures)
    body = [f"## {preset}", "", *intro,
            (f"Suites: {suites_run}. Lossless check: "
             f"{lossless} of {modes_run} policy runs produced exactly target-only decoding's tokens."), "",
            exactness_sentence([r for f in figures for r in f.results]), ""]
    body += headline + jumps + dynamic + why_section(figures) + cost_aware
    return body, {"headline": h, "jumps": j, "dynamic": d, "costaware": c}
