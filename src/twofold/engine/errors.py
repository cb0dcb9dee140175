"""Typed errors of the engine.

`PlanError` is raised before anything runs (a plan or dataflow that does not type-check);
`EvalError` is raised by reads of a collection whose error collection is non-empty at the read
time; `NotReadableError` by reads outside the `since <= t < upper` window; `ResultTooLarge` by a
peek whose result exceeds its size limit. Evaluation errors *inside* a dataflow are never raised:
they are data in the dataflow's error collection.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises."""


class PlanError(EngineError, ValueError):
    """A plan, expression or dataflow description is ill-typed or refers to something unknown.

    The message names the plan node (a path such as `objects_to_build[0].Mfp.input.Join`) and the
    column or expression at fault.
    """


class EvalError(EngineError):
    """A read found the collection's error collection non-empty at the read time.

    `message` is the (deterministically chosen, smallest) error message, e.g. `division by zero`.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotReadableError(EngineError, ValueError):
    """A read at a time outside the collection's `since <= t < upper` window."""


class ResultTooLarge(EngineError):
    """A peek result exceeds the result-size limit."""


class InputError(EngineError, ValueError):
    """Updates handed to the engine are malformed (wrong columns or types, time outside the
    input's open window, unknown import id). Nothing of the rejected input is applied."""
