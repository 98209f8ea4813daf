"""The study harness: benchmarks against transformers, the pass-cost curves, and the study's claims
over whole prompt suites (runner, report). Uses `specviz.pair`, `specviz.decoding` and
`specviz.explain` (the what-if and the cost model) only."""
