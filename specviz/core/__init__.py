"""Decode one prompt: the model pair, the lookahead policies, the draft-verify loop with both KV
caches, the oracle's ideal lookahead, and the records of what each run did. Uses nothing from
`specviz.study` or `specviz.ui`."""
