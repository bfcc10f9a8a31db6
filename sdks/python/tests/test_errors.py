"""The SDK's errors as values: they keep their attributes across pickling and copying."""

from __future__ import annotations

import copy
import pickle
import sys
import traceback

import pytest

import troupe

ERRORS = [
    troupe.ActorError("ValueError", "boom", "raised", 'File "app.py", line 3\nValueError: boom'),
    troupe.ActorError("TypeError", ""),
    troupe.ApiVersionMismatch("versions differ", sdk_api_version=3, daemon_api_version=2),
    troupe.TlsConfigError("no such file", option="tls_ca", path="/nope/ca.pem"),
    troupe.NotFound("no app hosts 'crat'"),
    troupe.Overloaded("mailbox full"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_survives_pickling_and_copying(error: troupe.TroupeError) -> None:
    # Raised in a worker process (multiprocessing, concurrent.futures), an error
    # reaches the parent pickled; one that does not come back as it was would
    # fail the parent with a TypeError instead.
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(again) is type(error)
        assert str(again) == str(error)
        assert vars(again) == vars(error)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes are Python 3.11+")
def test_an_unpickled_actor_error_has_its_note_once() -> None:
    again = pickle.loads(pickle.dumps(ERRORS[0]))
    assert again.__notes__ == ERRORS[0].__notes__
    assert len(again.__notes__) == 1


def test_errors_print_by_their_public_name() -> None:
    # An uncaught one reads as users import it.
    shown = traceback.format_exception_only(ERRORS[0])
    assert shown[0].startswith("troupe.ActorError: ValueError: boom"), shown
    public = [getattr(troupe, name) for name in troupe.__all__]
    errors = [obj for obj in public if isinstance(obj, type) and issubclass(obj, BaseException)]
    assert errors, "troupe exports no errors"
    assert {e.__name__: e.__module__ for e in errors} == {e.__name__: "troupe" for e in errors}
