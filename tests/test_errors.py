"""Errors carry their meaning: each class its exit code, HTTP status and code,
all in ``foliko_cli.errors``; serve answers by the class, never by the text."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import foliko_cli
from foliko_cli import errors
from foliko_cli.errors import FolikoError

CLASSES = [
    value
    for value in vars(errors).values()
    if inspect.isclass(value) and issubclass(value, FolikoError)
]


def core_modules():
    for info in pkgutil.walk_packages(foliko_cli.__path__, "foliko_cli."):
        if ".static" in info.name or info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def test_every_foliko_error_is_defined_in_the_errors_module():
    elsewhere = sorted(
        f"{module.__name__}.{name}"
        for module in core_modules()
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, FolikoError)
        and value.__module__ != "foliko_cli.errors"
    )
    assert elsewhere == []


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_error_class_has_an_exit_code_an_http_status_and_a_code(cls):
    assert cls.exit_code in vars(errors.ExitCode).values()
    assert 400 <= cls.http_status <= 599
    assert cls.code and cls.code.replace("_", "").isalpha() and cls.code.islower()
    assert isinstance(cls.retryable, bool)


def test_serve_answers_by_the_class_whatever_the_message_says():
    from foliko_cli.serve.errors import status_of

    said = "the server did not answer in time; variable 'k' is not set"
    assert status_of(errors.ModelError(said)) == (502, "model_error", True)
    assert status_of(errors.ModelTimeoutError("slow")) == (504, "timeout", True)
    assert status_of(errors.UsageError(said)) == (400, "invalid_request", False)
    assert status_of(errors.VariableNotSetError("gone")) == (404, "variable_not_found", False)


@pytest.mark.parametrize(
    ("status", "expected"),
    [(400, (400, "model_rejected_request", False)), (401, (502, "model_error", False))],
)
def test_a_refusal_by_the_provider_is_the_client_s_fault_unless_it_refuses_foliko(status, expected):
    from foliko_cli.serve.errors import status_of

    assert status_of(errors.ModelRejectedError("no", status)) == expected


def test_a_failed_workflow_step_answers_as_its_cause():
    cause = errors.SessionBusyError("s", 1.0, None)
    failed = errors.StepFailed("step", 1, 2, cause)
    assert (failed.exit_code, failed.http_status, failed.code) == (4, 409, "session_busy")
