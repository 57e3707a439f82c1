"""Development-only helpers, used by ``tests/`` and ``benches/`` and never by a lowering:
recording the inputs of passes during a real lowering (:mod:`.capture`), replaying them through
stock and accelerated classes (:mod:`.fusion_replay`), and whole-program equality for the edge
stage (:mod:`.program_compare`)."""
