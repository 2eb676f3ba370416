"""CLI commands, one module each with ``register(subparsers)`` and ``run(args)``."""
