"""The Arm pass pipeline: the re-trace engine that runs its ``ExportPass`` re-traces in place
(:mod:`.engine`, :mod:`.inplace`, :mod:`.passthrough`) and the accelerated view/permute passes
(:mod:`.passes`)."""
