"""Measure and explain runs: the what-if replay, calibration and work split, benchmarks against
transformers, and the study's claims over whole prompt suites. Uses `specviz.pair` and `specviz.decoding` only."""
