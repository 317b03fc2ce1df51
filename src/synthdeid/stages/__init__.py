"""The ``synthdeid`` subcommands, one module per stage, named after it.

The stage ``x-y`` is ``synthdeid x-y`` on the command line, the module
``synthdeid.stages.x_y`` here and the rule ``x_y`` in the workflow. A stage's
module holds only the command: its docstring (the first line is its
``synthdeid --help`` summary), ``register_arguments(parser)``, ``run(args)``
and helpers that parse, print or write for it; the logic lives in the domain
packages. The mapping and its variant rules: ``docs/stages/README.md``.
"""
