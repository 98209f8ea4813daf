"""Explain one run: the numbers the page shows beside a comparison, and the what-if replay.

The draft's calibration and where the work went (analysis), the cost model behind every modeled
time (costs), the what-if replay of any policy on a greedy run (sweep) and the best fixed threshold
in hindsight (hindsight). Pure: comparisons in, numbers out; no torch, no models. Uses
`specviz.decoding` only; the page (`specviz.ui`) and the study harness (`specviz.study`) use it."""
