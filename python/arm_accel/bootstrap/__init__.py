"""Start-up: the import hook ``arm_accel_hook.pth`` hands over to (:mod:`.hook`) and the
activation that checks the versions and installs the patch table (:mod:`.activation`).
Imports nothing: the hook runs at interpreter start-up."""
