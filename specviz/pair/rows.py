"""How many rows a row-exact draft reads in one call. Pure: no torch, so that decoding's feeding
protocol (decoding/feeding.py) and the what-if replay can read it without loading a model."""

# The most committed tokens a row-exact draft reads in one catch-up call (drafters.ModelDrafter): what
# every row-exact draft set-up promises (cpu.ROW_SIZES's largest, the bundled int8 draft's row-by-row
# products).
CATCH_UP_ROWS = 32
