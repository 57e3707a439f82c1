"""Run-time mechanisms the pipeline and the edge stage share: per-thread scopes, the collector
scope of a lowering, the fake-value memo, the codegen memo and deferred recompiles, the caller's
stack entry, the identity of a re-traced graph and shared provenance records. Each is consulted
per call and stays stock outside its scope."""
