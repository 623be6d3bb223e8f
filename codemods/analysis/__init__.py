"""The analysis: what the program is, found once and asked by the rules.

``collect`` walks each module once into ``facts`` (scopes, bindings, calls, loops, imports; ``names``
resolves what a name refers to); ``flow`` follows values through calls; ``roles`` says what a value is
(a model, an optimizer, a device); ``distributed`` (with ``launcher_values`` and ``rank_tests``) finds the
distributed code a script wrote by hand; ``plan`` decides what is prepared where, with ``prepared_uses``
answering which uses see the prepared objects; ``mixed_precision``, ``gradient_accumulation`` and
``creation`` are analyses a rule asks the plan for (``plan.analysis(X)``), built once; ``agreement`` says
which values every process shares. Nothing here edits code or knows about rules. Import the module you
need: this package re-exports nothing.
"""
