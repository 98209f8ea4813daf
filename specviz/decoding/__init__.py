"""Decoding one prompt: records, policies, drafters, the engine's loop, the oracle, the pipeline."""
