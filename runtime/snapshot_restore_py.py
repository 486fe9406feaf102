"""SnapStart's runtime hooks for Python functions, under the module name and
functions AWS's runtime gives them, so code written for SnapStart runs
unchanged: `register_before_snapshot(func, *args, **kwargs)` and
`register_after_restore(func, *args, **kwargs)`, also usable as
decorators. thaw's agent runs them as SnapStart does: the before-snapshot
hooks once, before the function's snapshot is taken, in the reverse order
of their registration; the after-restore hooks in every restored instance,
in the order of their registration.
"""

_before_snapshot = []
_after_restore = []


def register_before_snapshot(func, *args, **kwargs):
    _before_snapshot.append((func, args, kwargs))
    return func


def register_after_restore(func, *args, **kwargs):
    _after_restore.append((func, args, kwargs))
    return func


def get_before_snapshot():
    """The hooks in the order they run: the last registered first."""
    return list(reversed(_before_snapshot))


def get_after_restore():
    """The hooks in the order they run: as registered."""
    return list(_after_restore)
