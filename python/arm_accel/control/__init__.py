"""What a user switches and reads back: the on/off switch every accelerated path consults per
call (:mod:`.switch`), the counters it records (:mod:`.counters`) and the typed records
``arm_accel.stats()`` / ``arm_accel.status()`` return (:mod:`.records`). Standard library only:
every layer imports it."""
