"""Finding the `troupe` daemon binary that was installed with this package.

The wheel carries the daemon (maturin's binary packaging), installed into the
environment's scripts directory next to `python`; test kits and tools that
start a daemon look for it here rather than on a PATH the user may not have
activated.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from ._errors import TroupeError

_NAME = "troupe.exe" if sys.platform == "win32" else "troupe"


class DaemonNotFound(TroupeError):
    """No `troupe` daemon binary where this package installs it, nor on PATH."""


def daemon_path() -> str:
    """The path of the `troupe` daemon binary: `$TROUPE_BIN` when set, else
    the one installed with this package, else the first on PATH.

    Raises DaemonNotFound, saying where it looked, when there is none.
    """
    explicit = os.environ.get("TROUPE_BIN")
    if explicit:
        if _runnable(Path(explicit)):
            return explicit
        raise DaemonNotFound(
            f"TROUPE_BIN={explicit!r} is not an executable file; point it at a troupe "
            "binary or unset it to use the one installed with the troupe package"
        )
    looked = _install_dirs()
    for directory in looked:
        candidate = directory / _NAME
        if _runnable(candidate):
            return str(candidate)
    on_path = shutil.which(_NAME)
    if on_path:
        return on_path
    places = ", ".join(str(d) for d in looked)
    raise DaemonNotFound(
        f"no {_NAME} binary in {places} or on PATH; install the package with its daemon "
        "(pip install troupe) or set TROUPE_BIN to a troupe binary"
    )


def _install_dirs() -> list[Path]:
    """Where pip puts the package's scripts: this interpreter's environment,
    then the user scheme (`pip install --user`)."""
    dirs = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        dirs.append(Path(sysconfig.get_path("scripts", user_scheme)))
    return list(dict.fromkeys(dirs))


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
