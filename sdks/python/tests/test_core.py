"""Which core the SDK runs on (troupe._core): the native one when it loads, else the
pure-Python one with a single warning; TROUPE_SDK_CORE forces either."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from troupe import _core

# Imports the SDK as a platform without the native module would: troupe._native
# cannot be imported (None in sys.modules makes its import raise ImportError).
_WITHOUT_NATIVE = """
import sys, warnings
warnings.simplefilter("default")
sys.modules["troupe._native"] = None
import troupe, troupe._client, troupe._app
from troupe import _core
print(_core.name())
"""


def _python(code: str, core: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != _core.CORE_ENV}
    if core is not None:
        env[_core.CORE_ENV] = core
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_suite_runs_on_the_core_it_asked_for() -> None:
    # check.sh runs the suite once per core; neither run may fall back silently.
    wanted = os.environ.get(_core.CORE_ENV)
    if not wanted:
        pytest.skip(f"{_core.CORE_ENV} unset: the automatic choice is tested below")
    assert _core.name() == wanted


def test_falls_back_to_python_with_one_warning_when_native_cannot_load() -> None:
    done = _python(_WITHOUT_NATIVE, None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python"
    warnings = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1, done.stderr
    assert "troupe._native" in warnings[0]
    assert "pure-Python core" in warnings[0]


def test_python_forced_needs_no_native_module_and_warns_nothing() -> None:
    done = _python(_WITHOUT_NATIVE, "python")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python"
    assert "Warning" not in done.stderr


def test_native_forced_fails_the_import_when_the_module_cannot_load() -> None:
    done = _python(_WITHOUT_NATIVE, "native")
    assert done.returncode != 0
    assert "TROUPE_SDK_CORE=native" in done.stderr


def test_an_unknown_core_is_refused_by_name() -> None:
    done = _python("import troupe", "rust")
    assert done.returncode != 0
    assert "TROUPE_SDK_CORE='rust'" in done.stderr


def test_the_typescript_sdks_value_is_left_to_it() -> None:
    # One environment may run both SDKs: TROUPE_SDK_CORE=js forces the TypeScript
    # SDK's fallback and leaves this SDK's choice as if unset.
    probe = "import troupe\nfrom troupe import _core\nprint(_core.name())"
    unset, js = _python(probe, None), _python(probe, "js")
    assert js.returncode == 0, js.stderr
    assert js.stdout == unset.stdout
