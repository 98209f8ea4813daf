"""The web page and what it shows: layout and events (Gradio), token and column HTML, charts,
replay, downloads, imports, and the public API. Uses `specviz.pair`, `specviz.decoding` and `specviz.explain`."""
