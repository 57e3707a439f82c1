"""Every change arm-accel makes to a torch or executorch object, declared in one table.

- :mod:`.table`: the rows (replaced attributes, swapped pass classes) by group, and the stock
  behaviours the code models, each with the stock sources it was read from, pinned by digest
  per version;
- :mod:`.installer`: installs and uninstalls them (one lock, one journal) and reports each
  row's state;
- :mod:`.sources`: source digests, live or read from another installation's files;
- :mod:`.check`: which rows another torch / executorch would keep stock.
"""

from arm_accel.patches.installer import (
    holds,
    install,
    installed,
    model_states,
    original,
    states,
    uninstall,
)

__all__ = ["holds", "install", "installed", "model_states", "original", "states", "uninstall"]
