"""HyPar: layer-wise data or model parallelism per level of an accelerator array, minimising the bytes
exchanged; its report, its project mapping and its simulated comparison with pure data parallelism."""
