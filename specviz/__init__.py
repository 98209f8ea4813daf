"""SpecViz: see how speculative decoding spends its work.

Five packages, one per stage of the data flow (docs/DESIGN.md); imports run one way, from ui and
study down to explain, from explain down to decoding, and from decoding down to the pair:

    pair/      the model pair, set up for the machine: presets, where weights come from (weights,
               wheel_parts), loading (models), the CPU and GPU set-ups (cpu, kquant, gpu), a
               smaller draft output layer (vocab, draft_head)
    decoding/  decode one prompt: lookahead rules (policies) and their registry (modes), what
               proposes tokens (drafters, lookup), the draft-verify loop (engine), the oracle's
               ideal (oracle), what a pass costs (costcurve), how the draft reads the text
               (feeding), one prompt through every policy (pipeline), and the records all of it
               produces (trace)
    explain/   explain a run, without torch: the what-if replay (sweep), calibration and work
               split (analysis), the cost model (costs), the best threshold in hindsight
               (hindsight)
    study/  the study harness: benchmarks (bench, hf_reference) and the study over whole suites
            (runner, report)
    ui/     the web page: its layout and events (page, events), the HTML it shows (render,
            columns, replay), its charts (plots, explain_plots), downloads and imports (export,
            files), and the public API (api)

`cli.py` is the command line (`python -m specviz`), `errors.py` the one error type every stage
raises for bad input, `colors.py` the policy colours every view shares.
"""

from .errors import SpecVizError

__all__ = ["SpecVizError"]
