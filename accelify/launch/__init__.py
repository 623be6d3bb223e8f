"""The tool's launch side: ``accelify launch``, ``accelify test``, and what each launched process runs.

Who calls whom::

    accelify launch (cli/launch.py) -> plan.resolve_plan -> run.execute -> torch.distributed.run
        -> python -m accelify.launch.worker script.py (one per process) -> the script -> accelify.runtime
    accelify test (cli/test.py) -> selftest.run_checks -> run.execute ... -> check_script.py

- :mod:`.plan`: the command line over the config file and environment -> a validated ``LaunchPlan``.
- :mod:`.run`: the plan through ``torch.distributed.run`` in this process; a worker's failure -> ``LaunchResult``.
- :mod:`.worker`: what each process runs around the user's script (records a failing rank's traceback).
- :mod:`.selftest` and :mod:`.check_script`: ``accelify test``'s bundled checks.

This package's ``__init__`` imports nothing: every process imports it before its script runs
(``python -m accelify.launch.worker``), and a launch must cost what a plain run costs.
"""
