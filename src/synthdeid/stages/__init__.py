"""The ``synthdeid`` subcommands, one module per stage, named after it.

The stage ``x-y`` is ``synthdeid x-y`` on the command line, the module
``synthdeid.stages.x_y`` here and the rule ``x_y`` in the workflow. A stage's
module holds only the command: its docstring (the first line is its
``synthdeid --help`` summary), ``register_arguments(parser)``, ``run(args)``
and short private helpers that parse, print or write for it; the logic (types,
statistics, tables, figures) lives in the domain packages
(``tests/test_stage_modules.py`` holds every stage to this). The mapping, its
variant rules and how to add a stage: ``docs/stages/README.md``.
"""
