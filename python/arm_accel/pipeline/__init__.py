"""The Arm pass pipeline: the re-trace engine that runs its ``ExportPass`` re-traces in place
(:mod:`.engine`, :mod:`.inplace`, :mod:`.passthrough`), the accelerated view/permute passes
(:mod:`.passes`), and a delegate's fake outputs under the engine's scopes (:mod:`.delegate`)."""
