"""The model pair: named presets, where weights come from, loading, and setting it up for a CPU or a GPU."""
