"""The one model of what stock torch.fx does to a graph that every re-trace model shares: how it
names nodes (``names``), which meta a traced node gets (``meta``), in which order it files users
and ``find_nodes`` entries (``order``), which values are still what dispatch gave (``freshness``),
and the journal that undoes edits to the graph as it came (``journal``). The in-place re-trace,
the propagation's virtual re-trace, the accelerated passes and the edge replay all use these.
Why each is stock's behaviour: design.md, "fxstock"."""

from arm_accel.fxstock import freshness, meta, names, order
from arm_accel.fxstock.journal import GraphJournal

__all__ = ["GraphJournal", "freshness", "meta", "names", "order"]
