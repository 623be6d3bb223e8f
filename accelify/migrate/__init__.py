"""Batch runs over a folder: what ``accelify migrate`` (and ``convert DIR``) is made of, one module per step.

``discovery`` walks the tree (``.gitignore``, excludes, which files are candidates, no parse); ``grouping`` puts
each script with the local modules it imports into jobs; ``workers`` converts the jobs in worker processes;
``migration`` runs the whole thing and writes (``--in-place`` / ``--out``); ``report`` writes the JSON and HTML
reports. Import the module you need: this package re-exports nothing.
"""
