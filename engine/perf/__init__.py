"""The cost model: op cost, tiling, collectives, device memory."""
