"""Hooks to register on a communicator (torchcomms.hooks' counterparts):

* FlightRecorderHook: a ring of the last N operations per communicator (state, sizes, dtypes,
  the allreduce algorithm, timings, errors), dumped as JSON on demand or when the communicator
  aborts.
* NanCheckHook: raises NanCheckError before an operation whose input holds NaN (and Inf) values.
  Off unless registered.

    from cclx.hooks import FlightRecorderHook, NanCheckHook
    fr = FlightRecorderHook(max_entries=1024)
    fr.register_with_comm(comm)
    NanCheckHook().register_with_comm(comm)
    ...
    print(fr.dump_json())
"""
from .flight_recorder import FlightRecorderHook
from .nan_check import NanCheckError, NanCheckHook

__all__ = ["FlightRecorderHook", "NanCheckError", "NanCheckHook"]
