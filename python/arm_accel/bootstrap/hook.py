"""Import-hook part of the transparent activation.

``arm_accel_hook.pth`` must cost nothing measurable at interpreter start-up, so it imports
nothing: it puts a tiny inline bootstrap finder on ``sys.meta_path`` that only reacts to
``executorch.backends.arm._passes`` and then calls :func:`bootstrap` here, which swaps in
:class:`ArmAccelFinder` (also used by ``arm_accel.enable()``; imports only ``sys``).

That finder reacts to nothing but the import of ``executorch.backends.arm._passes`` (and, as a
retry point, ``executorch.backends.arm._passes.arm_pass_manager``): it lets the normal finders
locate the module, wraps its loader so that our callback runs right after the module has
executed, and hands the rest to :mod:`arm_accel.bootstrap.activation` (imported only at that point).
"""

import sys

WATCHED = (
    "executorch.backends.arm._passes",
    "executorch.backends.arm._passes.arm_pass_manager",
)


def _on_loaded(name: str) -> None:
    try:
        from arm_accel.bootstrap import activation

        activation.on_module_loaded(name)
    except Exception as exc:  # never break the user's import
        try:
            import logging

            logging.getLogger("arm_accel").warning(
                "arm_accel: activation failed, stock passes stay in use: %r", exc
            )
        except Exception:
            pass


class DelegatingLoader:
    """Delegates to the real loader; subclasses run their own code around ``exec_module``
    (:meth:`run`), after which the module's spec and ``__loader__`` name the real loader again,
    so that nothing downstream ever sees the wrapper."""

    def __init__(self, loader: object, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec):  # noqa: ANN001
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module) -> None:  # noqa: ANN001
        self.run(lambda: self._exec(module))

    def run(self, exec_module) -> None:  # noqa: ANN001
        exec_module()

    def _exec(self, module) -> None:  # noqa: ANN001
        try:
            self._loader.exec_module(module)  # type: ignore[attr-defined]
        finally:
            try:
                module.__loader__ = self._loader
                if module.__spec__ is not None:
                    module.__spec__.loader = self._loader
            except Exception:
                pass

    def __getattr__(self, item: str):  # get_source, get_resource_reader, is_package, ...
        return getattr(self._loader, item)


class _PostExecLoader(DelegatingLoader):
    """Calls back after ``exec_module``."""

    def run(self, exec_module) -> None:  # noqa: ANN001
        exec_module()
        _on_loaded(self._name)


def spec_from_others(me: object, fullname, path=None, target=None):  # noqa: ANN001
    """The spec the finders of ``sys.meta_path`` other than ``me`` give, in their order (None:
    none finds the module)."""
    for finder in sys.meta_path:
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class ArmAccelFinder:
    """A meta-path finder that only ever answers for the watched module names."""

    def __init__(self) -> None:
        self.pending = set(WATCHED)

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001
        if fullname not in self.pending:
            return None
        self.pending.discard(fullname)
        if not self.pending:
            uninstall()
        spec = spec_from_others(self, fullname, path, target)
        if spec is None:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PostExecLoader(spec.loader, fullname)
        return spec

    def invalidate_caches(self) -> None:
        pass


def installed():  # -> ArmAccelFinder | None
    for finder in sys.meta_path:
        if isinstance(finder, ArmAccelFinder) or type(finder).__name__ == "ArmAccelFinder":
            return finder  # type: ignore[return-value]
    return None


def install() -> bool:
    """Put the finder on ``sys.meta_path`` (idempotent). Returns True if it is installed now."""
    if installed() is None:
        sys.meta_path.insert(0, ArmAccelFinder())
    return True


def uninstall() -> None:
    finder = installed()
    while finder is not None:
        sys.meta_path.remove(finder)
        finder = installed()


def bootstrap(fullname, path=None, target=None):
    """Called by the inline bootstrap finder of ``arm_accel_hook.pth`` when
    ``executorch.backends.arm._passes`` is first imported: replace it by the real finder and let
    that one answer."""
    uninstall()
    install()
    return installed().find_spec(fullname, path, target)
