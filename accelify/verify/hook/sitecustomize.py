"""Python's startup hook, as ``accelify verify`` uses it: with this folder first on ``PYTHONPATH``, Python imports
this module before the script and it activates the recorder when ``ACCELIFY_VERIFY_RECORD`` is set.

Then it runs the ``sitecustomize`` module that this one shadows, if the environment has one further down the path,
so that a site's own customisation still applies to the verified script.
"""

import os
import sys


def _activate() -> None:
    if os.environ.get("ACCELIFY_VERIFY_RECORD"):
        import accelify_verify_recorder

        accelify_verify_recorder.install_from_environment()


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_activate()
_chain()
