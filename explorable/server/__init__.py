"""A public server's boundaries: what a browser may change, compute budgets, health, bounded logs, memory."""


def install() -> None:
    """Once per served process: bounded logs, the compute budget, and the deep health check."""
    from explorable.server import budget, health, log_limits

    log_limits.install()
    budget.install()
    health.install()
