"""The engine: how a conversion runs, whatever the rules say.

``transform`` runs the ordered rules over one program and returns an ``Outcome``; ``context`` is what a
rule sees (the facts, the plan, and the ways to propose edits and warnings); ``edits`` holds the proposed
edits and applies them in one pass; ``positions`` finds the line and column of warned-about nodes;
``outcome`` is the frozen record a conversion ends with; ``rule`` is the base class of every rule;
``targets`` says which library the converted script imports; ``notebook_launch`` is the step that runs
after the rules for a notebook (``notebook_launcher``). Import the module you need: this package
re-exports nothing.
"""
