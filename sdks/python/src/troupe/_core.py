"""Which core carries the SDK's client calls and app stream.

The native core is ``troupe._native`` (crates/sdk-python over crates/sdk-core, in
Rust): it owns the connections, the app stream and invoke/tell, and hands this
layer serialized messages in batches. Where it cannot load (a platform without a
build of it), the pure-Python core on grpcio takes over, with one warning at
import. ``TROUPE_SDK_CORE=python`` or ``=native`` forces one (``native`` fails
the import when the module cannot load), for tests and comparisons. ``js``, the
TypeScript SDK's name for its own fallback, is that SDK's to act on: here it
chooses as if unset, since one environment may run both SDKs.
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType

CORE_ENV = "TROUPE_SDK_CORE"
_CORES = ("python", "native")
# Values meant for the other SDK (its fallback's name), left to it.
_OTHER_SDKS = ("js",)


def _load() -> ModuleType | None:
    wanted = os.environ.get(CORE_ENV, "").strip().lower()
    if wanted in _OTHER_SDKS:
        wanted = ""
    if wanted and wanted not in _CORES:
        raise ImportError(f"{CORE_ENV}={wanted!r}: use 'python', 'native', or leave it unset")
    if wanted == "python":
        return None
    try:
        from . import _native
    except ImportError as e:
        if wanted == "native":
            raise ImportError(
                f"{CORE_ENV}=native, but the native core troupe._native cannot load: {e}"
            ) from e
        warnings.warn(
            f"troupe: the native core (troupe._native) cannot load ({e}); using the slower"
            f" pure-Python core. Set {CORE_ENV}=python to choose it without this warning.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return _native


native: ModuleType | None = _load()


def name() -> str:
    """The core in use: "native" or "python"."""
    return "python" if native is None else "native"
